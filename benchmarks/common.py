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


def machine() -> dict:
    return {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()}


def emit(name: str, result: dict) -> None:
    """Prints the figures readably, then one JSON line for tools."""
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
