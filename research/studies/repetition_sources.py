"""Where a system's duplicate n-grams come from: how many outputs hold them, how much of the
total the worst outputs hold, which n-grams repeat most, and the pooled rate without the worst
output. A pooled rate (See et al.'s Fig. 4 measure, `dup_3gram_pct` of pgn_tf.evaluate) can
hang on one runaway output among hundreds; this tells a loop in one summary from repetition
spread over many.

    python -m research.studies.repetition_sources EVAL_DIR/decoded.jsonl [...] [--n 3] [--top 10]

Each file is a `pgn_tf.evaluate` decoded.jsonl (fields "decoded" and "reference", tokens
separated by spaces). Prints a report per file, the references' rate beside the outputs', and
one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json

from pgn_tf.metrics.scoring import ngrams
from research.common import emit


def duplicates(tokens: list[str], n: int) -> tuple[int, int, collections.Counter]:
    """(n-grams, duplicate n-grams, the duplicates by n-gram) of one output: an n-gram seen k
    times counts k - 1 duplicates, as dup_<n>gram_pct counts them."""
    grams = ngrams(tokens, n)
    counts = collections.Counter(grams)
    dups = collections.Counter({g: c - 1 for g, c in counts.items() if c > 1})
    return len(grams), sum(dups.values()), dups


def pooled_pct(counts: list[tuple[int, int, collections.Counter]]) -> float:
    """Duplicate n-grams as a share of all n-grams, over outputs' `duplicates` counts."""
    grams = sum(c[0] for c in counts)
    return round(100 * sum(c[1] for c in counts) / grams, 2) if grams else 0.0


def report(rows: list[dict], n: int = 3, top: int = 10) -> dict:
    """The sources of one system's duplicate n-grams (rows: decoded.jsonl records)."""
    outputs = [r["decoded"].split() for r in rows]
    per = [duplicates(t, n) for t in outputs]
    total = sum(d for _, d, _ in per)
    by_gram = collections.Counter()
    for _, _, dups in per:
        by_gram.update(dups)
    order = sorted(range(len(per)), key=lambda i: -per[i][1])
    worst = order[0] if order and per[order[0]][1] else None
    return {
        "outputs": len(rows),
        "dup_pct": pooled_pct(per),
        "reference_dup_pct": pooled_pct([duplicates(r["reference"].split(), n) for r in rows]),
        "outputs_with_duplicates": sum(1 for _, d, _ in per if d),
        "duplicates": total,
        "worst_output_duplicates": per[worst][1] if worst is not None else 0,
        "worst_10_share_pct": round(100 * sum(per[i][1] for i in order[:10]) / total, 1)
        if total else 0.0,
        "dup_pct_without_worst": pooled_pct([c for i, c in enumerate(per) if i != worst]),
        "worst_output": " ".join(outputs[worst]) if worst is not None else "",
        "top_ngrams": [[" ".join(g), c] for g, c in by_gram.most_common(top)],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("decoded", nargs="+", help="pgn_tf.evaluate decoded.jsonl files")
    p.add_argument("--n", type=int, default=3, help="the n-gram order")
    p.add_argument("--top", type=int, default=10, help="the most repeated n-grams listed")
    a = p.parse_args(argv)
    if a.n < 1:
        p.error("--n must be at least 1")
    results = {}
    for path in a.decoded:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        r = results[path] = report(rows, a.n, a.top)
        print(f"{path}\n  duplicate {a.n}-grams {r['dup_pct']}% (references "
              f"{r['reference_dup_pct']}%); {r['outputs_with_duplicates']} of {r['outputs']} "
              f"outputs hold {r['duplicates']}; the worst output {r['worst_output_duplicates']}, "
              f"the worst 10 {r['worst_10_share_pct']}%; without the worst output "
              f"{r['dup_pct_without_worst']}%\n  most repeated: "
              + ", ".join(f"'{g}' x{c}" for g, c in r["top_ngrams"])
              + f"\n  worst output: {r['worst_output'][:200]}")
    emit("repetition_sources", {"n": a.n, "files": {
        k: {x: v[x] for x in ("dup_pct", "reference_dup_pct", "outputs_with_duplicates",
                              "worst_output_duplicates", "dup_pct_without_worst")}
        for k, v in results.items()}})


if __name__ == "__main__":
    main()
