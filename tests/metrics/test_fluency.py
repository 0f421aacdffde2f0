"""The fluency model: interpolated Kneser-Ney probabilities pinned by hand on a toy corpus,
normalised for every context, and a repeated word scoring worse than its clean twin."""

import math

import numpy as np
import pytest

from pgn_tf.metrics import fluency
from pgn_tf.metrics.fluency import EOS, UNK, KneserNeyLM

TOY = [["a", "b"], ["a", "c"]]


def test_bigram_probabilities_by_hand():
    """Corpus "a b", "a c"; order 2, D = 0.5, V = {a, b, c, <unk>, </s>}.
    Unigram continuation counts (distinct left words): a 1 (<s>), b 1, c 1, </s> 2 (b, c);
    total 5, 4 types: P1(w) = (N1+(.w) - 0.5 + 0.5 * 4 / 5) / 5, so P1(a) = P1(b) = P1(c) =
    0.18, P1(</s>) = 0.38, P1(<unk>) = 0.08.
    P(a | <s>) = (2 - 0.5 + 0.5 * 1 * 0.18) / 2 = 0.795; P(b | a) = (1 - 0.5 + 0.5 * 2 * 0.18)
    / 2 = 0.34; P(</s> | b) = (1 - 0.5 + 0.5 * 0.38) / 1 = 0.69; P(b | <s>) = 0.5 * 0.18 / 2 =
    0.045; P(b | b) = 0.5 * 0.18 = 0.09."""
    lm = KneserNeyLM.fit(TOY, order=2, discount=0.5, min_count=1)
    assert lm.vocab == frozenset({"a", "b", "c", UNK, EOS})
    for word, context, p in [("a", [], 0.795), ("b", ["a"], 0.34), ("</s>", ["b"], 0.69),
                             ("b", [], 0.045), ("b", ["b"], 0.09), ("zebra", ["a"], 0.04),
                             ("a", ["zebra"], 0.18)]:  # unseen word: <unk>; unseen context: P1
        assert lm.prob(word, context) == pytest.approx(p, abs=1e-12), (word, context)
    nll, n = lm.sentence_nll(["a", "b"])
    assert n == 3 and nll == pytest.approx(-math.log(0.795 * 0.34 * 0.69))
    assert fluency.perplexity([(nll, n)]) == pytest.approx((0.795 * 0.34 * 0.69) ** (-1 / 3))
    assert lm.sentence_nll(["b", "b"])[0] == pytest.approx(-math.log(0.045 * 0.09 * 0.69))


def test_unigram_model_is_the_continuation_distribution():
    lm = KneserNeyLM.fit(TOY, order=1, discount=0.5, min_count=1)
    # order 1 uses raw counts: a 2, b 1, c 1, </s> 2 (total 6, 4 types)
    assert lm.prob("a", ["b"]) == pytest.approx((2 - 0.5 + 0.5 * 4 / 5) / 6)
    assert lm.prob(UNK, []) == pytest.approx(0.5 * 4 / 5 / 6)


@pytest.mark.parametrize("discount", [None, 0.75])
def test_every_context_sums_to_one(discount):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(12)]
    corpus = [list(rng.choice(words, rng.integers(1, 8))) for _ in range(200)]
    lm = KneserNeyLM.fit(corpus, order=3, discount=discount, min_count=2)
    contexts = [[], ["w1"], ["w1", "w2"], ["<s>", "w3"], ["w0", "w0"], ["nope", "w4"],
                list(corpus[0])]
    for context in contexts:
        total = sum(lm.prob(w, context) for w in lm.vocab)
        assert total == pytest.approx(1.0, abs=1e-9), context
    assert all(0 < d < 1 for d in lm.discounts)


def test_a_repeated_word_scores_worse_than_its_clean_twin():
    refs = ["slide and add puzzle game for text mode", "puzzle game for kids",
            "card game for text mode", "plugin for claws mail", "mail reader plugin for text mode",
            "game engine for puzzle games", "text mode mail reader"] * 5
    lm = KneserNeyLM.fit([r.split() for r in refs], order=3)
    for clean, repeated in [("puzzle game for text mode", "puzzle game game for text mode"),
                            ("plugin for claws mail", "plugin plugin for claws mail")]:
        good = fluency.perplexity([fluency.summary_nll(lm, [clean.split()])])
        bad = fluency.perplexity([fluency.summary_nll(lm, [repeated.split()])])
        assert bad > 1.5 * good, (clean, good, bad)


def test_summaries_are_scored_sentence_by_sentence():
    lm = KneserNeyLM.fit(TOY, order=2, discount=0.5, min_count=1)
    one = lm.sentence_nll(["a", "b"])
    two = fluency.summary_nll(lm, [["a", "b"], ["a", "b"]])
    assert two == pytest.approx((2 * one[0], 2 * one[1]))
    assert fluency.summary_nll(lm, []) == pytest.approx(lm.sentence_nll([]))  # an empty summary


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="order"):
        KneserNeyLM.fit(TOY, order=0)
    with pytest.raises(ValueError, match="discount"):
        KneserNeyLM.fit(TOY, discount=1.5)
