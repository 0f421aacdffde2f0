"""Does a decoding switch that should not change the summaries change them? The share of
identical summaries between two decoded files of the same examples, and ROUGE-1/2/Lsum of each
with its paired delta: how a speed lever (decode.shortlist, the export) is shown to keep the
summaries.

    python -m research.studies.same_outputs A/decoded.jsonl B/decoded.jsonl [--name LABEL]

Both files are `pgn_tf.evaluate` decoded.jsonl (or .gz) rows of the same examples in the same
order. Prints the figures readably, then one JSON line.
"""

from __future__ import annotations

import argparse

from pgn_tf.metrics import significance
from research.common import emit


def same_outputs(path_a: str, path_b: str, samples: int = 2_000) -> dict:
    """identical_pct, the examples, each ROUGE's means and B - A with its 95% interval, and the
    first differing pair."""
    a, b = significance.read_decoded(path_a), significance.read_decoded(path_b)
    if [r["reference"] for r in a] != [r["reference"] for r in b]:
        raise ValueError(f"{path_a} and {path_b} do not hold the same examples in the same order")
    same = [x["decoded"] == y["decoded"] for x, y in zip(a, b)]
    out = {"examples": len(a), "identical_pct": round(100 * sum(same) / len(a), 2) if a else 0.0}
    for metric in ("rouge1", "rouge2", "rougeLsum"):
        test = significance.paired_bootstrap(significance.per_example_rouge(a, metric),
                                             significance.per_example_rouge(b, metric), samples)
        out[metric] = {"a": round(test["mean_a"], 2), "b": round(test["mean_b"], 2),
                       "delta": test["delta"], "delta_ci95": test["delta_ci95"]}
    first = next((i for i, s in enumerate(same) if not s), None)
    if first is not None:
        out["first_difference"] = {"index": first, "a": a[first]["decoded"],
                                   "b": b[first]["decoded"]}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--name", default="same_outputs")
    a = p.parse_args(argv)
    emit(a.name, same_outputs(a.a, a.b))


if __name__ == "__main__":
    main()
