"""The machine and the code a measured figure came from, in the words every record prints: the
CPU's vector extensions, the instruction-set caps in force, TensorFlow's oneDNN setting and the
checkout's commit.

A figure means little without them. TensorFlow's CPU kernels differ by vector extension, and a
phase trained for a fixed number of minutes gets more steps on a faster CPU. So the speed tools
(benchmarks/), the studies (research/) and the fuzzers print these beside their figures, and a
resumed study compares them with its first run's. Importing this module reads nothing.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping

from pgn_tf.utils import onednn
from pgn_tf.utils.procfs import cpu_flags

VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")

# The caps under which a CPU with AVX-512 or AMX runs the kernels one with AVX2 only runs: in
# TensorFlow's and PyTorch's oneDNN, in the MKL the reference system's PyTorch calls, in
# PyTorch's own vectorized kernels (ATEN_CPU_CAPABILITY), and in the code XLA generates for a
# compiled step (decode.jit_step; XLA_FLAGS, added to any flags already set). TensorFlow's own
# kernels are built for AVX at most, so they need no cap. Under the oneDNN cap
# `train.mixed_precision=auto` resolves to float32 (pgn_tf.training.hardware), as on such a
# CPU. No cap emulates the rest of the chip (clock, caches, memory): the ratios it gives are
# checked against a real AVX2-only CPU's in research/records/2026-11-28-cpu-emulation-check.md.
CPU_EMULATIONS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                           "ATEN_CPU_CAPABILITY": "avx2",
                           "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}}
CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
FLAG_LISTS = ("XLA_FLAGS",)  # caps that are one flag among others in their variable


def vector_flags() -> dict[str, bool] | None:
    """{flag: present} of the vector extensions that decide TensorFlow's CPU speed (from
    /proc/cpuinfo); None where the CPU's flags cannot be read."""
    flags = cpu_flags()
    if flags is None:
        return None
    return {f: f in flags for f in VECTOR_FLAGS}


def active_caps(env: Mapping[str, str] | None = None) -> str:
    """The ISA caps set in env (default this process's), as `NAME=VALUE` words ("" for none)."""
    env = os.environ if env is None else env
    words = [f"{k}={env[k]}" for k in CAP_VARIABLES if env.get(k)]
    words += [f"{k}={flag}" for k in FLAG_LISTS for flag in env.get(k, "").split()
              if flag.startswith("--xla_cpu_max_isa=")]
    return " ".join(words)


def with_cap(env: Mapping[str, str], key: str, value: str) -> dict[str, str]:
    """env with the cap key=value: set, or for a flag list (FLAG_LISTS) added to the flags
    there in place of any earlier value of the same flag."""
    if key in FLAG_LISTS and env.get(key):
        kept = [f for f in env[key].split() if f.split("=")[0] != value.split("=")[0]]
        return {**env, key: " ".join([*kept, value])}
    return {**env, key: value}


def emulation_environment(cpu: str, env: Mapping[str, str]) -> dict[str, str]:
    """env with the caps of CPU_EMULATIONS[cpu] (none for "native" or another name)."""
    out = dict(env)
    for k, v in CPU_EMULATIONS.get(cpu, {}).items():
        out = with_cap(out, k, v)
    return out


def cpu_flags_text() -> str:
    """The present vector extensions as one string (printed beside every figure), followed by
    the emulation in force where the ISA is capped (CPU_EMULATIONS)."""
    flags = vector_flags()
    if flags is None:
        text = "unknown"
    else:
        text = (" ".join(f for f, on in flags.items() if on)
                or "none of " + ",".join(VECTOR_FLAGS))
    caps = active_caps()
    return text + (f" (emulating {caps})" if caps else "")


def code_version(root: str) -> str:
    """The commit of the git checkout at root (with "+changes" when its work tree differs from
    it), so a long run's record says which code produced it; "unknown" outside a checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, check=True, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def describe() -> dict:
    """This machine, as the JSON line of a figure records it."""
    return {"cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "cpu_flags": cpu_flags_text(),
            "isa_caps": active_caps(), "tf_onednn": onednn.state()}


def result_line(kind: str, name: str, result: dict) -> str:
    """The one JSON line a run prints for tools: {kind: name}, its figures and the machine
    (kind: "benchmark" for a speed tool, "study" for a study)."""
    return json.dumps({kind: name, **result, **describe()})


def report_lines(kind: str, name: str, result: dict) -> list[str]:
    """A run's figures as people read them (with the CPU's flags and the oneDNN setting), then
    result_line last."""
    return [f"  cpu_flags: {cpu_flags_text()}", f"  TensorFlow's oneDNN: {onednn.state()}",
            *(f"  {k}: {v}" for k, v in result.items()), result_line(kind, name, result)]
