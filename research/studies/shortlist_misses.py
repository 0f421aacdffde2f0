"""Does a vocabulary shortlist leave out words the full search writes? Where a shortlisted
search's summaries differ from the full vocabulary's, either a word the full search chose is
outside the candidate set (decode.shortlist: the K most frequent words and the batch's article
words), or the softmax renormalised over the candidates moved the beam's scores. This counts
the first: the full-vocabulary outputs' words that are neither among the K most frequent nor in
their own article (a stricter set than the batch's, which also holds its other articles' words).

    python -m research.studies.shortlist_misses FULL/decoded.jsonl --model_dir DIR --data PATH \
        --shortlist 2000 [--shortlist 5000 ...]

decoded.jsonl: `pgn_tf.evaluate`'s rows, of the first examples of PATH in order. Prints, per K,
the share of outputs with such a word and the share of output tokens that are one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

from pgn_tf import text
from pgn_tf.data import jsonl
from pgn_tf.metrics import significance
from pgn_tf.vocab import SPECIAL_TOKENS, Vocab
from research.common import emit


def misses(decoded: list[str], articles: list[str], vocab_words: list[str],
           shortlist: int) -> dict:
    """outputs_pct / tokens_pct: outputs holding, and output tokens that are, a vocabulary word
    ranked at or past `shortlist` (vocab_words in frequency order, no special tokens) that the
    output's article does not hold. Out-of-vocabulary words are copies: never a miss."""
    rank = {w: i for i, w in enumerate(vocab_words)}
    outputs = tokens = missed = 0
    for out, article in zip(decoded, articles, strict=True):
        words = set(text.tokenize_py(article))
        toks = out.split()
        m = sum(1 for w in toks if rank.get(w, -1) >= shortlist and w not in words)
        outputs += m > 0
        tokens += len(toks)
        missed += m
    return {"shortlist": shortlist,
            "outputs_pct": round(100 * outputs / len(decoded), 2) if decoded else 0.0,
            "tokens_pct": round(100 * missed / tokens, 3) if tokens else 0.0}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("decoded")
    p.add_argument("--model_dir", required=True, help="holds vocab.txt and config.json")
    p.add_argument("--data", required=True, help="the JSONL(.gz) the outputs were decoded from")
    p.add_argument("--shortlist", type=int, action="append", required=True)
    a = p.parse_args(argv)
    rows = significance.read_decoded(a.decoded)
    articles = [ex.article for ex in itertools.islice(jsonl.read_jsonl(a.data), len(rows))]
    with open(os.path.join(a.model_dir, "config.json"), encoding="utf-8") as f:
        size = json.load(f)["data"]["vocab_size"]
    words = Vocab.load(os.path.join(a.model_dir, "vocab.txt"), size).words[len(SPECIAL_TOKENS):]
    emit("shortlist_misses", {f"k{k}": misses([r["decoded"] for r in rows], articles, words, k)
                              for k in a.shortlist})


if __name__ == "__main__":
    main()
