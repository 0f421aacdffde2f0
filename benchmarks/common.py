"""Shared helpers for the benchmark scripts: timing statistics and the JSON result line."""

from __future__ import annotations

import json
import os
import platform

import numpy as np


def percentiles(latencies_s: list[float]) -> dict:
    ms = np.asarray(latencies_s) * 1000.0
    if not len(ms):
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2)}


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> str:
    """The CPU's vector extensions that decide TF's CPU speed (printed beside every figure)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return "unknown"
    return " ".join(f for f in VECTOR_FLAGS if f in flags) or "none of " + ",".join(VECTOR_FLAGS)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "cpu_flags": cpu_flags()}


def emit(name: str, result: dict) -> None:
    """Prints the figures readably (with the CPU's vector flags), then one JSON line for tools."""
    print(f"  cpu_flags: {cpu_flags()}")
    for k, v in result.items():
        print(f"  {k}: {v}")
    print(json.dumps({"benchmark": name, **result, **machine()}), flush=True)


def articles_from(path: str | None, n: int, model_dir: str | None = None) -> list[str]:
    """n articles from a data path (any pgn_tf format), else from the synthetic corpus."""
    if path:
        from pgn_tf.evaluate import read_split

        exs = read_split(path, None, n)
        return [e.article for e in exs] * (n // len(exs) + 1)
    from pgn_tf.data import synthetic

    return [e.article for e in synthetic.generate(n, seed=99)]
