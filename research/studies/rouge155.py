"""The same summaries scored by rouge-score (the project's scorer) and by ROUGE-1.5.5 (the
papers'): what the scorer changes in a table's figures.

    python -m research.studies.rouge155 FILE.jsonl[.gz] [FILE ...] [--limit N] [--bootstrap 1000]

Each FILE is a `decoded.jsonl` that `pgn_tf.evaluate --output_dir` writes (its `decoded` tokens
and `reference` sentences): the decoded tokens become one sentence a line as pgn_tf.evaluate
scores them, and both scorers read the same strings. Prints each file's ROUGE-1/2/L from both
and their differences, with the CPU's vector flags, and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pgn_tf.data import jsonl
from pgn_tf.metrics import rouge155
from pgn_tf.metrics.scoring import rouge
from pgn_tf.text import tokens_to_sentences
from research.common import emit


def read_decoded(path: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(decoded summaries with one sentence a line, references) of a decoded.jsonl file."""
    decoded, references = [], []
    with jsonl.open_lines(path) as f:
        for raw in f:
            row = json.loads(raw)
            decoded.append(tokens_to_sentences(row["decoded"].split()))
            references.append(row["reference"])
            if limit and len(decoded) >= limit:
                break
    return decoded, references


def compare(path: str, limit: int | None, bootstrap: int) -> dict:
    decoded, references = read_decoded(path, limit)
    ours = rouge(decoded, references, bootstrap)
    perl = rouge155.score(decoded, references, bootstrap)
    row = {"file": os.path.basename(path), "examples": len(decoded)}
    for a, b in (("rouge1", "rouge1"), ("rouge2", "rouge2"), ("rougeLsum", "rougeL")):
        row[f"{a}_rouge_score"] = ours[a]
        row[f"{b}_rouge155"] = perl[b]
        row[f"{b}_difference"] = round(perl[b] - ours[a], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.studies.rouge155",
                                description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--limit", type=int)
    p.add_argument("--bootstrap", type=int, default=1000)
    a = p.parse_args(argv)
    rows = []
    for path in a.files:
        row = compare(path, a.limit, a.bootstrap)
        print(f"{row['file']}: ROUGE-1 {row['rouge1_rouge_score']} -> {row['rouge1_rouge155']}, "
              f"ROUGE-2 {row['rouge2_rouge_score']} -> {row['rouge2_rouge155']}, ROUGE-L(sum) "
              f"{row['rougeLsum_rouge_score']} -> {row['rougeL_rouge155']} (rouge-score -> "
              f"ROUGE-1.5.5)", flush=True)
        rows.append(row)
    emit("rouge155", {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
