"""Shared helpers for the benchmark scripts: timing statistics and the JSON result line."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np

from pgn_tf.training import hardware
from pgn_tf.utils import onednn


def percentiles(latencies_s: list[float]) -> dict:
    ms = np.asarray(latencies_s) * 1000.0
    if not len(ms):
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2)}


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def vector_flags() -> dict[str, bool] | None:
    """{flag: present} of the vector extensions that decide TF's CPU speed (/proc/cpuinfo, read
    by pgn_tf.training.hardware); None where the CPU's flags cannot be read."""
    flags = hardware.cpu_flags()
    if flags is None:
        return None
    return {f: f in flags for f in VECTOR_FLAGS}


def cpu_flags() -> str:
    """The present vector extensions as one string (printed beside every figure), followed by
    the emulation in force where oneDNN's ISA is capped (`--cpu`, CPU_EMULATIONS)."""
    flags = vector_flags()
    if flags is None:
        text = "unknown"
    else:
        text = (" ".join(f for f, on in flags.items() if on)
                or "none of " + ",".join(VECTOR_FLAGS))
    caps = active_caps()
    return text + (f" (emulating {caps})" if caps else "")


# `--cpu NAME` of compare_peer, train_throughput and decode_throughput: the caps under which a
# CPU with AVX-512 or AMX runs the kernels one with AVX2 only runs, in TensorFlow's and
# PyTorch's oneDNN, in the MKL the peer's PyTorch calls, and in PyTorch's own vectorized
# kernels (ATEN_CPU_CAPABILITY), and in the code XLA generates for a compiled step
# (decode.jit_step; XLA_FLAGS, added to any flags already set). TensorFlow's own kernels are
# built for AVX at most, so they need no cap. Under the oneDNN cap this project's
# `train.mixed_precision=auto` resolves to float32 (pgn_tf.training.hardware), as on such a
# CPU. What no cap emulates is the rest of
# the chip (clock, caches, memory): the ratios it gives are checked against a real AVX2-only
# CPU's in research/records/2026-11-28-cpu-emulation-check.md.
CPU_EMULATIONS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                           "ATEN_CPU_CAPABILITY": "avx2",
                           "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}}
CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
FLAG_LISTS = ("XLA_FLAGS",)  # caps that are one flag among others in their variable


def active_caps() -> str:
    """The ISA caps set in this process's environment, as `NAME=VALUE` words ("" for none)."""
    words = [f"{k}={os.environ[k]}" for k in CAP_VARIABLES if os.environ.get(k)]
    words += [f"{k}={flag}" for k in FLAG_LISTS for flag in os.environ.get(k, "").split()
              if flag.startswith("--xla_cpu_max_isa=")]
    return " ".join(words)


def _with_cap(env: dict, key: str, value: str) -> dict:
    """env with the cap key=value: set, or for a flag list added to the flags there."""
    if key in FLAG_LISTS and env.get(key):
        kept = [f for f in env[key].split() if f.split("=")[0] != value.split("=")[0]]
        return {**env, key: " ".join([*kept, value])}
    return {**env, key: value}


def add_cpu_flag(parser) -> None:
    parser.add_argument("--cpu", choices=["native", *CPU_EMULATIONS], default="native",
                        help="run as a CPU of this type would (avx2: oneDNN, MKL and PyTorch's "
                             "kernels capped at AVX2, so float32 where `auto` would pick bf16; "
                             "the record names the emulation beside the real flags)")


def emulate_cpu(cpu: str, module: str, argv: list[str]) -> None:
    """Re-runs `python -m module argv` in this process with the caps of `cpu` in its
    environment (none for "native") and TensorFlow's oneDNN setting that pgn_tf's commands start
    with (pgn_tf.utils.onednn: on where unset), unless both are set already: each takes effect
    only when set before TensorFlow or PyTorch loads or first runs a kernel, so the process
    starts anew. A benchmark then measures what the commands run."""
    env = onednn.environment(os.environ, platform.machine())
    for k, v in CPU_EMULATIONS.get(cpu, {}).items():
        env = _with_cap(env, k, v)
    if env == dict(os.environ):
        return
    sys.stdout.flush()
    os.execvpe(sys.executable, [sys.executable, "-m", module, *argv], env)


def refuse_emulated_bf16(cpu: str, precision: str, what: str) -> None:
    """ValueError where a run meant to show a CPU without bf16 asks for bf16 outright (it would
    run emulated, which no such user would choose)."""
    if cpu != "native" and precision == "mixed_bfloat16":
        raise ValueError(f"--cpu {cpu} runs as a CPU without bf16, but {what} sets "
                         "train.mixed_precision=mixed_bfloat16: leave it auto or float32")


def code_version() -> str:
    """The repository's commit (with "+changes" when the work tree differs from it), so a long
    run's record says which code produced it; "unknown" outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, check=True, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def machine() -> dict:
    return {"cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "cpu_flags": cpu_flags(),
            "isa_caps": active_caps(), "tf_onednn": onednn.state()}


def result_line(name: str, result: dict) -> str:
    """The one JSON line a benchmark prints for tools: its name, figures and the machine."""
    return json.dumps({"benchmark": name, **result, **machine()})


def emit(name: str, result: dict) -> None:
    """Prints the figures readably (with the CPU's vector flags), then one JSON line for tools."""
    print(f"  cpu_flags: {cpu_flags()}")
    print(f"  TensorFlow's oneDNN: {onednn.state()}")
    for k, v in result.items():
        print(f"  {k}: {v}")
    print(result_line(name, result), flush=True)


def articles_from(path: str | None, n: int, model_dir: str | None = None) -> list[str]:
    """n articles from a data path (any pgn_tf format), else from the synthetic corpus."""
    if path:
        from pgn_tf.data.dataset import read_split

        exs = read_split(path, None, n)
        return [e.article for e in exs] * (n // len(exs) + 1)
    from pgn_tf.data import synthetic

    return [e.article for e in synthetic.generate(n, seed=99)]


_WRAPPERS = ("ExecutorState::Process", "ParallelFor")  # spans around ops, not ops


def top_ops(logdir: str, n: int = 15, scope_depth: int = 0) -> list[tuple[str, float]]:
    """(op type, % of op time) of a tf.profiler trace under logdir, from its XPlane (host ops);
    with scope_depth > 0, (the first scope_depth parts of the op's name, %) instead: e.g. at 4,
    "gradient_tape/pointer_generator_1/encoder_1/while" holds the encoder loop's gradient."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals: dict[str, float] = {}
    for root, _, files in os.walk(logdir):
        for fn in files:
            if not fn.endswith(".xplane.pb"):
                continue
            space = xplane_pb2.XSpace()
            with open(os.path.join(root, fn), "rb") as f:
                space.ParseFromString(f.read())
            for plane in space.planes:
                names = {k: v.name for k, v in plane.event_metadata.items()}
                for line in plane.lines:
                    # op events sit on "TF Ops" lines, or (TF 2.21's host trace) on the
                    # executor's "tf_Compute/..." threads, inside ExecutorState::Process spans
                    # that would count them twice
                    if not ("tf_op" in line.name.lower() or "TF Ops" in line.name
                            or line.name.startswith("tf_Compute")):
                        continue
                    for ev in line.events:
                        name = names.get(ev.metadata_id, "?")
                        if name in _WRAPPERS:
                            continue
                        if scope_depth:
                            op = "/".join(name.rsplit(":", 1)[0].split("/")[:scope_depth])
                        else:
                            op = name.split(":")[-1] if ":" in name else name
                        totals[op] = totals.get(op, 0.0) + ev.duration_ps / 1e12
    total = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:n]
    return [(op, round(100 * t / total, 1)) for op, t in ranked]
