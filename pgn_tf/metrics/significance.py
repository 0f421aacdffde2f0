"""Is system B better than system A on the same examples? Per-example ROUGE and a paired
bootstrap test (Koehn 2004; Berg-Kirkpatrick et al. 2012).

`compare` reads two `decoded.jsonl` files (or their .gz, as benchmarks/results keeps them) written
by `pgn_tf.evaluate` for the same examples in the same order, scores each pair with rouge-score
(stemmed; sentences on separate lines for rougeLsum) and resamples the examples with
replacement: the p-value is the share of resamples in which B's mean is not above A's
(one-sided). The command line is `python -m pgn_tf.significance`.
"""

from __future__ import annotations

import gzip
import json

import numpy as np

from pgn_tf.text import tokens_to_sentences
from pgn_tf.utils.errors import UserError

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")  # rougeL: the RL reward (metrics.rewards)


def read_decoded(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def per_example_rouge(rows: list[dict], metric: str = "rougeLsum") -> np.ndarray:
    """F1 x100 of each decoded row against its reference, float64 [n]."""
    from rouge_score import rouge_scorer

    if metric not in METRICS:
        raise UserError(f"unknown metric '{metric}' ({', '.join(METRICS)})")
    scorer = rouge_scorer.RougeScorer([metric], use_stemmer=True)
    return np.array([100 * scorer.score(r["reference"],
                                        tokens_to_sentences(r["decoded"].split()))[metric].fmeasure
                     for r in rows])


def paired_bootstrap(a: np.ndarray, b: np.ndarray, samples: int = 10_000,
                     seed: int = 0) -> dict:
    """One-sided paired bootstrap of mean(b) > mean(a) over the same examples.

    Returns dict(mean_a, mean_b, delta, delta_ci95 [lo, hi], p_value, samples)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise UserError(f"paired scores must be two equal non-empty lists, got {a.shape} "
                        f"and {b.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(samples, len(a)))
    deltas = (b - a)[idx].mean(axis=1)
    return {"mean_a": round(float(a.mean()), 3), "mean_b": round(float(b.mean()), 3),
            "delta": round(float((b - a).mean()), 3),
            "delta_ci95": [round(float(np.percentile(deltas, 2.5)), 3),
                           round(float(np.percentile(deltas, 97.5)), 3)],
            "p_value": float((np.sum(deltas <= 0) + 1) / (samples + 1)), "samples": samples}


def compare(path_a: str, path_b: str, metric: str = "rougeLsum", samples: int = 10_000) -> dict:
    a_rows, b_rows = read_decoded(path_a), read_decoded(path_b)
    if [r["reference"] for r in a_rows] != [r["reference"] for r in b_rows]:
        raise UserError(f"{path_a} and {path_b} do not hold the same examples in the same order")
    out = paired_bootstrap(per_example_rouge(a_rows, metric), per_example_rouge(b_rows, metric),
                           samples)
    out.update(metric=metric, examples=len(a_rows))
    return out
