"""Fluency: how likely a summary's sentences are under a language model that is neither the
summarizer nor the RL reward. An interpolated Kneser-Ney n-gram model (Kneser & Ney 1995, in
the interpolated form of Chen & Goodman 1999, eq. 26, one discount per order) fitted on the
training set's reference summaries.

Why this model: ROUGE, the RL reward and checkpoint selection all count n-gram overlap with
the references, so an RL arm can buy ROUGE with text no reader would write ("2048 game
game"). Paulus et al. paired their ROUGE gains with a human readability study for that reason;
with no readers here, the perplexity of the outputs under an independent model of how the
references are written is the measure nearest to it. An n-gram model needs no training run,
is fitted in seconds, is deterministic, and its probabilities are exact fractions of counts that
a test can pin by hand.

Each summary is scored sentence by sentence (one reference line, or one output sentence, is
one sequence: `<s> <s> w1 ... wn </s>`), so that multi-sentence digests are scored as their
references were counted. Words seen fewer than `min_count` times in the references are
`<unk>`, which then has a probability as any word does; a word the references never hold is
`<unk>` too. A summary's score is its mean negative log-probability per predicted token (its
words and each sentence's `</s>`); a set's perplexity is exp of the total over the tokens.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


class KneserNeyLM:
    """An interpolated Kneser-Ney model of `order` (3: trigrams). Build it with `fit`.

    P_k(w | h) = (max(c_k(h w) - D_k, 0) + D_k * N1+(h .) * P_{k-1}(w | h')) / c_k(h .)
    and P_{k-1}(w | h') where the context h was never seen; P_0(w) = 1 / |V|. c_N is the count
    of the n-gram, c_k for k < N its continuation count N1+(. h w), the number of distinct
    words seen before it (Chen & Goodman 1999, section 3.5). Each order's probabilities sum
    to 1 over the vocabulary V (the words kept, <unk> and </s>) for every context.
    """

    def __init__(self, order: int, discounts: Sequence[float], vocab: frozenset[str],
                 counts: list[dict[tuple, collections.Counter]]):
        self.order = order
        self.discounts = tuple(discounts)  # D_1 .. D_N
        self.vocab = vocab
        self._counts = counts  # per order k (index k-1): context -> Counter(word -> count)
        self._totals = [{h: sum(c.values()) for h, c in level.items()} for level in counts]
        self._cache: dict[tuple, float] = {}

    @classmethod
    def fit(cls, sentences: Iterable[Sequence[str]], order: int = 3,
            discount: float | None = None, min_count: int = 2) -> KneserNeyLM:
        """Counts the sentences (token lists). discount: one D for every order, or None for
        Ney's estimate D_k = n1 / (n1 + 2 n2) of each order's count-of-counts (the number of
        n-grams seen once, and twice)."""
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        sentences = [list(s) for s in sentences if len(s)]
        freq = collections.Counter(w for s in sentences for w in s)
        keep = {w for w, c in freq.items() if c >= min_count and w not in (BOS, EOS, UNK)}
        vocab = frozenset(keep | {UNK, EOS})
        pad = [BOS] * (order - 1)
        top: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
        for s in sentences:
            seq = pad + [w if w in keep else UNK for w in s] + [EOS]
            for i in range(order - 1, len(seq)):
                top[tuple(seq[i - order + 1 : i])][seq[i]] += 1
        counts = [top]
        for _ in range(order - 1):  # continuation counts of the order below, from the one above
            above = counts[0]
            lower: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
            for h, words in above.items():
                for w in words:
                    lower[h[1:]][w] += 1  # one distinct left word h[0] for (h[1:], w)
            counts.insert(0, lower)
        if discount is None:
            discounts = [_ney_discount(level) for level in counts]
        else:
            if not 0 < discount < 1:
                raise ValueError(f"discount must be in (0, 1), got {discount}")
            discounts = [discount] * order
        return cls(order, discounts, vocab, [dict(level) for level in counts])

    def prob(self, word: str, context: Sequence[str]) -> float:
        """P(word | the last order-1 tokens of context); a word outside the vocabulary is
        <unk>; a short context is padded with <s>."""
        word = word if word in self.vocab else UNK
        context = [BOS] * (self.order - 1) + [w if w in self.vocab or w == BOS else UNK
                                               for w in context]
        return self._prob(word, tuple(context[len(context) - self.order + 1 :]))

    def _prob(self, word: str, context: tuple) -> float:
        key = (word, context)
        if key in self._cache:
            return self._cache[key]
        lower = (self._prob(word, context[1:]) if context else 1.0 / len(self.vocab))
        k = len(context)  # order k + 1, index k
        seen = self._counts[k].get(context)
        if seen is None:
            p = lower
        else:
            d = self.discounts[k]
            p = (max(seen.get(word, 0) - d, 0.0) + d * len(seen) * lower) / self._totals[k][context]
        if len(self._cache) < 2_000_000:  # a bound on memory, whatever the outputs hold
            self._cache[key] = p
        return p

    def sentence_nll(self, tokens: Sequence[str]) -> tuple[float, int]:
        """(-sum of natural-log probabilities, the number of tokens predicted) of one sentence:
        its words, then </s>."""
        seq = [w if w in self.vocab else UNK for w in tokens] + [EOS]
        context = (BOS,) * (self.order - 1)
        total = 0.0
        for w in seq:
            total -= math.log(self._prob(w, context))
            if context:
                context = (*context[1:], w)
        return total, len(seq)


def _ney_discount(level: dict[tuple, collections.Counter]) -> float:
    n1 = sum(1 for c in level.values() for v in c.values() if v == 1)
    n2 = sum(1 for c in level.values() for v in c.values() if v == 2)
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


def summary_nll(lm: KneserNeyLM, sentences: Sequence[Sequence[str]]) -> tuple[float, int]:
    """(-log-probability, predicted tokens) of a summary given as its sentences' tokens; an
    empty summary is one empty sentence (only its </s>)."""
    nll = n = 0
    for s in sentences or [[]]:
        a, b = lm.sentence_nll(s)
        nll, n = nll + a, n + b
    return nll, n


def perplexity(scores: Sequence[tuple[float, int]]) -> float:
    """exp(total negative log-probability / total predicted tokens) of summary_nll scores."""
    nll = sum(s[0] for s in scores)
    n = sum(s[1] for s in scores)
    return math.exp(nll / n) if n else float("nan")
