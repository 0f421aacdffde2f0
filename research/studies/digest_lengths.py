"""Why are the digests' summaries shorter than their references? Which blocks an output leaves
out, by their place in the article.

A digest's reference has one synopsis per block, in the article's order, so a summary with
fewer sentences than blocks has left some block out. If the left-out blocks are mostly the
last ones, the search stops early (the [STOP] decision, length scoring, the minimum length);
if they are spread evenly, the model skips blocks as it reads (attention, coverage). This
tells the two apart from decoded files alone, per arm, and pairs arms on the same examples.

    python -m research.studies.digest_lengths A/decoded.jsonl [B/decoded.jsonl ...] [--name LABEL]

Each file is `pgn_tf.evaluate` decoded.jsonl (or .gz) rows of digests (`blocks` set). Prints
one JSON line per file under its path, then the paired sentence-count tests of each file
against the first.
"""

from __future__ import annotations

import argparse

import numpy as np

from pgn_tf.metrics import digests, significance
from research.common import emit


def _synopses(row: dict) -> list[str]:
    """The reference's lines: one synopsis per block of the article."""
    return [s for s in row["reference"].split("\n") if s.strip()]


def block_positions(rows: list[dict], threshold: float = digests.THRESHOLD) -> dict:
    """The figures of one decoded file's digests.

    sentences_mean / reference_sentences_mean; shorter_pct: outputs with fewer sentences than
    the article has blocks; matched_pct_by_position: the share of blocks matched (an output
    sentence at ROUGE-1 F1 >= threshold against the block's synopsis) at each place, "first",
    "middle" (every block between) and "last"; last_unmatched_share: of the unmatched blocks,
    the share that are the article's last; an even spread over n blocks would give 1/n, whose
    mean over the examples is uniform_last_share. The same for the outputs shorter than their
    article: a block is left out when no output sentence matches it better than any other
    block (its argmax); short_last_left_out_share against short_uniform_last_share."""
    rouge = digests.Rouge1()
    places = {"first": [0, 0], "middle": [0, 0], "last": [0, 0]}  # [matched, blocks]
    sentences, refs, shorter, unmatched, unmatched_last, uniform = [], [], 0, 0, 0, []
    left_out, left_out_last, short_uniform = 0, 0, []
    for r in rows:
        synopses = _synopses(r)
        outs = [" ".join(s) for s in digests.sentences(r["decoded"].split())]
        n = len(synopses)
        if n < 2:
            continue
        sim = rouge.matrix(outs, synopses)
        best = sim.max(axis=0) if outs else np.zeros(n)
        for i, b in enumerate(best):
            place = "first" if i == 0 else "last" if i == n - 1 else "middle"
            places[place][0] += int(b >= threshold)
            places[place][1] += 1
            if b < threshold:
                unmatched += 1
                unmatched_last += i == n - 1
        if len(outs) < n:
            addressed = {int(np.argmax(row)) for row in sim if row.max() > 0}
            gone = [i for i in range(n) if i not in addressed]
            left_out += len(gone)
            left_out_last += (n - 1) in gone
            short_uniform.append(1 / n)
        sentences.append(len(outs))
        refs.append(n)
        shorter += len(outs) < n
        uniform.append(1 / n)
    return {
        "digests": len(sentences),
        "sentences_mean": round(float(np.mean(sentences)), 3) if sentences else 0.0,
        "reference_sentences_mean": round(float(np.mean(refs)), 3) if refs else 0.0,
        "shorter_pct": round(100 * shorter / len(sentences), 2) if sentences else 0.0,
        "matched_pct_by_position": {k: round(100 * m / b, 2) if b else 0.0
                                    for k, (m, b) in places.items()},
        "last_unmatched_share": round(unmatched_last / unmatched, 3) if unmatched else 0.0,
        "uniform_last_share": round(float(np.mean(uniform)), 3) if uniform else 0.0,
        "short_last_left_out_share": round(left_out_last / left_out, 3) if left_out else 0.0,
        "short_uniform_last_share": (round(float(np.mean(short_uniform)), 3)
                                     if short_uniform else 0.0),
    }


def sentence_counts(rows: list[dict]) -> np.ndarray:
    """Each digest's output sentence count, float64 [n] (the paired tests' input)."""
    return np.array([len(digests.sentences(r["decoded"].split())) for r in rows
                     if len(_synopses(r)) >= 2],
                    np.float64)


def compare(paths: list[str], samples: int = 2_000) -> dict:
    """block_positions of each file, and each later file's sentence count against the first's
    (paired bootstrap: delta, its 95% interval, and p for 'not longer')."""
    decoded = [significance.read_decoded(p) for p in paths]
    for p, d in zip(paths[1:], decoded[1:]):
        if [r["reference"] for r in d] != [r["reference"] for r in decoded[0]]:
            raise ValueError(f"{p} and {paths[0]} do not hold the same examples in order")
    out = {p: block_positions(d) for p, d in zip(paths, decoded)}
    base = sentence_counts(decoded[0])
    for p, d in zip(paths[1:], decoded[1:]):
        test = significance.paired_bootstrap(base, sentence_counts(d), samples)
        out[p]["sentences_vs_first"] = {"delta": test["delta"], "delta_ci95": test["delta_ci95"],
                                        "p_not_longer": test["p_value"]}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--name", default="digest_lengths")
    a = p.parse_args(argv)
    emit(a.name, compare(a.paths))


if __name__ == "__main__":
    main()
