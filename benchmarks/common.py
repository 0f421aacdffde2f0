"""Shared helpers for the benchmark scripts: timing statistics and the JSON result line."""

from __future__ import annotations

import json
import os
import platform
import subprocess

import numpy as np

from pgn_tf.training import hardware


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
    """The present vector extensions as one string (printed beside every figure)."""
    flags = vector_flags()
    if flags is None:
        return "unknown"
    return " ".join(f for f, on in flags.items() if on) or "none of " + ",".join(VECTOR_FLAGS)


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
            "python": platform.python_version(), "cpu_flags": cpu_flags()}


def result_line(name: str, result: dict) -> str:
    """The one JSON line a benchmark prints for tools: its name, figures and the machine."""
    return json.dumps({"benchmark": name, **result, **machine()})


def emit(name: str, result: dict) -> None:
    """Prints the figures readably (with the CPU's vector flags), then one JSON line for tools."""
    print(f"  cpu_flags: {cpu_flags()}")
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
