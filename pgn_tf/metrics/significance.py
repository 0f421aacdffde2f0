"""Is system B better than system A on the same examples? Per-example measures and paired
tests: a paired bootstrap (Koehn 2004; Berg-Kirkpatrick et al. 2012) of ROUGE, novel words and
fluency, and McNemar's exact test of a yes/no measure (an output repeating a content word).

`compare` reads two `decoded.jsonl` files (or their .gz, as research/results keeps them) written
by `pgn_tf.evaluate` for the same examples in the same order and scores each pair:

  rouge1, rouge2, rougeL, rougeLsum  F1 x100 (rouge-score, stemmed; sentences on separate
                      lines for rougeLsum); higher is better.
  repeat_content_word  whether the output repeats a content word (scoring.repeats_content_word),
                      tested by McNemar's exact test on the pairs where A and B differ; lower is
                      better.
  novel_words         % of the output's words absent from its article (scoring.novel_words;
                      needs the articles); lower is fewer words from nowhere.
  fluency             the output's mean negative log-probability per token under the fluency
                      model (metrics.fluency; needs it); lower reads more like a reference.

Every result has p_value, the one-sided p of B's mean above A's, and p_value_below, of B's mean
below A's: for the lower-is-better measures p_value is the p of B being worse. The command line
is `python -m pgn_tf.significance`.
"""

from __future__ import annotations

import gzip
import json
import math

import numpy as np

from pgn_tf.text import tokens_to_sentences
from pgn_tf.utils.errors import UserError

ROUGE_METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")  # rougeL: the RL reward
METRICS = (*ROUGE_METRICS, "repeat_content_word", "novel_words", "fluency")
HIGHER_IS_BETTER = {**dict.fromkeys(ROUGE_METRICS, True), "repeat_content_word": False,
                    "novel_words": False, "fluency": False}


def read_decoded(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def per_example_rouge(rows: list[dict], metric: str = "rougeLsum") -> np.ndarray:
    """F1 x100 of each decoded row against its reference, float64 [n]."""
    from rouge_score import rouge_scorer

    if metric not in ROUGE_METRICS:
        raise UserError(f"unknown ROUGE metric '{metric}' ({', '.join(ROUGE_METRICS)})")
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
            "p_value": float((np.sum(deltas <= 0) + 1) / (samples + 1)),
            "p_value_below": float((np.sum(deltas >= 0) + 1) / (samples + 1)), "samples": samples}


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """McNemar's exact test of two yes/no measures of the same examples: under the null, each
    example where exactly one system says yes is B's with probability 1/2.

    Returns dict(share_a, share_b (% yes), delta, a_only, b_only, p_value (one-sided: B says
    yes more often), p_value_below (B less often))."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise UserError(f"paired flags must be two equal non-empty lists, got {a.shape} "
                        f"and {b.shape}")
    b_only, a_only = int(np.sum(b & ~a)), int(np.sum(a & ~b))
    n = a_only + b_only

    def tail(k: int) -> float:  # P(X >= k), X ~ Binomial(n, 1/2)
        return float(sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n) if n else 1.0

    return {"share_a": round(100 * float(a.mean()), 3), "share_b": round(100 * float(b.mean()), 3),
            "delta": round(100 * float(b.mean() - a.mean()), 3), "a_only": a_only,
            "b_only": b_only, "p_value": tail(b_only), "p_value_below": tail(a_only)}


def per_example(rows: list[dict], metric: str, articles: dict[str, list[str]] | None = None,
                lm=None) -> np.ndarray:
    """Each row's value of metric (METRICS): float64 [n], or bool [n] for repeat_content_word.
    articles (id -> article tokens) for novel_words; lm (a metrics.fluency.KneserNeyLM) for
    fluency, which without it reads the rows' own fluency_nll and fluency_tokens."""
    from pgn_tf.metrics import scoring

    if metric in ROUGE_METRICS:
        return per_example_rouge(rows, metric)
    tokens = [r["decoded"].split() for r in rows]
    if metric == "repeat_content_word":
        return np.array([scoring.repeats_content_word(t) for t in tokens], bool)
    if metric == "novel_words":
        if articles is None:
            raise UserError("novel_words needs the articles (--data: the split the rows decode)")
        missing = [r.get("id") for r in rows if r.get("id") not in articles]
        if missing:
            raise UserError(f"{len(missing)} rows have no article in the data (first id: "
                            f"{missing[0]!r})")
        counts = [scoring.novel_words(t, articles[r["id"]]) for t, r in zip(tokens, rows)]
        return np.array([100 * k / n if n else 0.0 for k, n in counts])
    if metric == "fluency":
        if lm is not None:
            scores = scoring.fluency_scores(lm, tokens)
        elif all("fluency_nll" in r for r in rows):
            scores = [(r["fluency_nll"], r["fluency_tokens"]) for r in rows]
        else:
            raise UserError("fluency needs the fluency model (--fluency_data: the training "
                            "split) or rows written by an evaluation that had one")
        return np.array([nll / n for nll, n in scores])
    raise UserError(f"unknown metric '{metric}' ({', '.join(METRICS)})")


def paired_test(a: np.ndarray, b: np.ndarray, metric: str, samples: int = 10_000) -> dict:
    """The metric's paired test: McNemar for the yes/no measure, the bootstrap otherwise."""
    if metric == "repeat_content_word":
        return mcnemar(a, b)
    return paired_bootstrap(a, b, samples)


def compare(path_a: str, path_b: str, metric: str = "rougeLsum", samples: int = 10_000,
            articles: dict[str, list[str]] | None = None, lm=None) -> dict:
    """The paired test of metric (METRICS) between two decoded files of the same examples;
    articles and lm as per_example's."""
    if metric not in METRICS:
        raise UserError(f"unknown metric '{metric}' ({', '.join(METRICS)})")
    a_rows, b_rows = read_decoded(path_a), read_decoded(path_b)
    if [r["reference"] for r in a_rows] != [r["reference"] for r in b_rows]:
        raise UserError(f"{path_a} and {path_b} do not hold the same examples in the same order")
    out = paired_test(per_example(a_rows, metric, articles, lm),
                      per_example(b_rows, metric, articles, lm), metric, samples)
    out.update(metric=metric, higher_is_better=HIGHER_IS_BETTER[metric], examples=len(a_rows))
    return out


def compare_with_data(path_a: str, path_b: str, metric: str = "rougeLsum",
                      samples: int = 10_000, *, data: str | None = None,
                      fluency_data: str | None = None, model_dir: str | None = None) -> dict:
    """compare, with the articles read from the split at data and the fluency model fitted on
    the training split at fluency_data, both tokenized under model_dir's config (default: the
    default config's); each is read only where metric needs it."""
    from pgn_tf import config as config_lib
    from pgn_tf.data.dataset import read_split
    from pgn_tf.metrics import scoring

    cfg = config_lib.load_from_model_dir(model_dir) if model_dir else config_lib.Config()
    articles = lm = None
    if metric == "novel_words" and data:
        articles = scoring.articles_by_id(read_split(data, None, None), cfg.data)
    if metric == "fluency" and fluency_data:
        lm = scoring.fit_reference_lm(read_split(fluency_data, None, None), cfg.data)
    return compare(path_a, path_b, metric, samples, articles, lm)
