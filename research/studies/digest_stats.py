"""The shape of a digest corpus, with the model's tokenizer: what the digest_* presets' lengths
and decoding minimum are chosen from (docs/results/digests.md).

    python -m research.studies.digest_stats DATA_DIR/train.jsonl.gz [--limit N] [--max_enc_steps 400]

Prints the article and summary token counts (mean, percentiles), the share of articles longer
than --max_enc_steps, the summaries shorter than 20 and 35 tokens (See et al.'s minimum), the
sentences per summary, whether each article has one block per summary line
(pgn_tf.metrics.digests), and the shares of summaries that repeat a word, a 2-gram and a 3-gram
(what a repeated-word or trigram block would forbid); then one JSON line.
"""

from __future__ import annotations

import argparse

import numpy as np

from pgn_tf import config as config_lib
from pgn_tf.data import dataset
from pgn_tf.metrics import digests as digest_metrics
from pgn_tf.metrics import scoring
from pgn_tf.text import is_word
from research.common import emit

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 100)


def repeats_ngram(tokens: list[str], n: int) -> bool:
    grams = scoring.ngrams(tokens, n)
    return len(grams) != len(set(grams))


def stats(examples, max_enc_steps: int) -> dict:
    cfg = config_lib.DataConfig()
    articles = scoring.tokenize_texts([e.article for e in examples], cfg)
    summaries = scoring.tokenize_texts([e.summary.replace("\n", " ") for e in examples], cfg)
    art = np.array([len(a) for a in articles])
    summ = np.array([len(s) for s in summaries])
    lines = np.array([len([x for x in e.summary.split("\n") if x.strip()]) for e in examples])
    blocks = np.array([len(digest_metrics.split_blocks(e.article)) for e in examples])

    def pct(flags) -> float:
        return round(100 * float(np.mean(flags)), 2)

    return {
        "examples": len(examples),
        "article_tokens_mean": round(float(art.mean()), 1),
        "article_tokens_percentiles": dict(zip(PERCENTILES, np.percentile(art, PERCENTILES)
                                               .round(1).tolist())),
        f"articles_over_{max_enc_steps}_pct": pct(art > max_enc_steps),
        "summary_tokens_mean": round(float(summ.mean()), 2),
        "summary_tokens_percentiles": dict(zip(PERCENTILES, np.percentile(summ, PERCENTILES)
                                               .round(1).tolist())),
        "summaries_under_20_tokens_pct": pct(summ < 20),
        "summaries_under_35_tokens_pct": pct(summ < 35),
        "sentences_per_summary_mean": round(float(lines.mean()), 2),
        "sentences_per_summary_counts": {int(k): int(v) for k, v in
                                         zip(*np.unique(lines, return_counts=True))},
        "one_block_per_line_pct": pct(blocks == lines),
        "summaries_repeating_a_word_pct": pct([len(w) != len(set(w)) for w in
                                               ([t for t in s if is_word(t)] for s in summaries)]),
        "summaries_repeating_a_2gram_pct": pct([repeats_ngram(s, 2) for s in summaries]),
        "summaries_repeating_a_3gram_pct": pct([repeats_ngram(s, 3) for s in summaries]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", help="a digest corpus file (JSONL, .gz)")
    p.add_argument("--limit", type=int, help="the first N examples only")
    p.add_argument("--max_enc_steps", type=int, default=400)
    a = p.parse_args()
    emit("digest_stats", {"data": a.data, **stats(dataset.read_split(a.data, None, a.limit),
                                                  a.max_enc_steps)})


if __name__ == "__main__":
    main()
