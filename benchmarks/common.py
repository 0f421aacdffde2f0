"""Shared helpers for the benchmark scripts: timing statistics and the JSON result line."""

from __future__ import annotations

import json
import os
import platform

import numpy as np

from pgn_tf import hardware


def percentiles(latencies_s: list[float]) -> dict:
    ms = np.asarray(latencies_s) * 1000.0
    if not len(ms):
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2)}


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def vector_flags() -> dict[str, bool] | None:
    """{flag: present} of the vector extensions that decide TF's CPU speed (/proc/cpuinfo, read
    by pgn_tf.hardware); None where the CPU's flags cannot be read."""
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
        from pgn_tf.evaluate import read_split

        exs = read_split(path, None, n)
        return [e.article for e in exs] * (n // len(exs) + 1)
    from pgn_tf.data import synthetic

    return [e.article for e in synthetic.generate(n, seed=99)]
