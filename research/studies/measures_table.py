"""Every measure of a study's kept outputs, each comparison with its paired test: ROUGE-1/2/Lsum,
outputs repeating a content word, novel words and fluency, recomputed from the decoded files a
study committed, so that measures added after a study ran reach its arms without rerunning it.

    python -m research.studies.measures_table --results research/results/rl_control_2026-11-28 \
        --data_dir DATA_DIR [--compare mixed:control,rl:control] [--out_name measures] \
        [--arm NAME=OTHER_STUDY/decoded_ARM.jsonl.gz]

--results holds decoded_<arm>.jsonl.gz files (the rows of `pgn_tf.evaluate`, with ids); DATA_DIR
holds the corpus' train and validation splits: the validation articles (matched by id) give
the novel words, the training references fit the fluency model (pgn_tf.metrics.fluency). Each
comparison "B:A" tests B against A on every measure (pgn_tf.metrics.significance: the paired
bootstrap, McNemar's exact test for the repeats; one-sided, p of B above A and of B below).
Writes <results>/<out_name>.json and <out_name>.md and prints the table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

from pgn_tf import config as config_lib
from pgn_tf.data.dataset import read_split
from pgn_tf.metrics import fluency, scoring, significance
from pgn_tf.text import is_content_word
from research.common import code_version, cpu_flags, emit

MEASURES = ("rouge1", "rouge2", "rougeLsum", "repeat_content_word", "novel_words", "fluency")
LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeLsum": "ROUGE-Lsum",
          "repeat_content_word": "repeating a content word %", "novel_words": "novel words %",
          "fluency": "fluency (perplexity)"}
ARM_NAMES = {"start": "the start", "ml": "ML continued", "control": "ML control",
             "control_seed2": "ML control, seed 2", "mixed": "ML+RL (mixed)",
             "mixed_seed2": "ML+RL (mixed), seed 2", "rl": "RL alone"}
DEFAULT_COMPARE = ("mixed:control", "mixed_seed2:control_seed2", "rl:control", "mixed:ml",
                   "rl:ml", "control:start", "control_seed2:start")


def arm_files(results: str) -> dict[str, str]:
    """arm -> its decoded file in results: decoded_<arm>.jsonl.gz, or decoded/<arm>.jsonl.gz
    (an rl_converged work dir)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "decoded_*.jsonl*"))
                       + glob.glob(os.path.join(results, "decoded", "*.jsonl*"))):
        out[os.path.basename(path).removeprefix("decoded_").split(".")[0]] = path
    return out


def measures_table(results: str, data_dir: str, compare: tuple[str, ...] = DEFAULT_COMPARE,
                   samples: int = 10_000, extra: dict[str, str] | None = None) -> dict:
    """Per arm every measure's mean (fluency as the set's perplexity), the references' own,
    and each comparison's paired tests. extra: more arms (name -> decoded file), such as
    another study's arms scored on the same pairs."""
    files = {**arm_files(results), **(extra or {})}
    if not files:
        raise FileNotFoundError(f"no decoded_<arm>.jsonl.gz in {results}")
    cfg = config_lib.Config().data
    rows = {arm: significance.read_decoded(path) for arm, path in files.items()}
    ids = {r["id"] for arm_rows in rows.values() for r in arm_rows}
    examples = [e for e in read_split(os.path.join(data_dir, "validation.jsonl.gz"), None, None)
                if e.id in ids]
    articles = scoring.articles_by_id(examples, cfg)
    lm = scoring.fit_reference_lm(read_split(os.path.join(data_dir, "train.jsonl.gz"), None,
                                             None), cfg)
    values = {arm: {m: significance.per_example(r, m, articles, lm) for m in MEASURES}
              for arm, r in rows.items()}
    first = next(iter(rows.values()))
    refs = [{"id": r["id"], "decoded": r["reference"].replace("\n", " "),
             "reference": r["reference"]} for r in first]
    out = {"arms": {arm: {**summary(v, rows[arm], lm), **repeat_causes(rows[arm], articles)}
                    for arm, v in values.items()},
           "references": {"repeat_content_word": round(100 * float(np.mean(
               significance.per_example(refs, "repeat_content_word"))), 2),
               "novel_words": round(float(np.mean(
                   significance.per_example(refs, "novel_words", articles))), 2),
               "fluency": perplexity(refs, lm)},
           "tests": {}, "examples": len(first), "results": results}
    for pair in compare:
        b, a = pair.split(":")
        if a not in values or b not in values:
            raise KeyError(f"comparison {pair}: arms present are {', '.join(values)}")
        out["tests"][pair] = {m: significance.paired_test(values[a][m], values[b][m], m, samples)
                              for m in MEASURES}
    return out


def repeat_causes(rows: list[dict], articles: dict[str, list[str]]) -> dict:
    """Of the outputs repeating a content word: the % whose repeated words the article repeats
    too (a repeat a block "unless the article repeats it" would allow), and the % whose
    ROUGE-L F1 (the RL reward) drops when the repeats are cut (each repeated content word kept
    once): repeats the reward pays for."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    licensed = paid = n = 0
    for r in rows:
        tokens = r["decoded"].split()
        if not scoring.repeats_content_word(tokens):
            continue
        n += 1
        seen, cut, repeated = set(), [], set()
        for t in tokens:
            key = t.lower()
            if is_content_word(t) and key in seen:
                repeated.add(key)
                continue
            seen.add(key)
            cut.append(t)
        article = [t.lower() for t in articles[r["id"]]]
        licensed += all(article.count(w) >= 2 for w in repeated)
        with_repeats = scorer.score(r["reference"], " ".join(tokens))["rougeL"].fmeasure
        paid += with_repeats > scorer.score(r["reference"], " ".join(cut))["rougeL"].fmeasure
    return {"repeats_the_article_repeats_pct": round(100 * licensed / n, 2) if n else 0.0,
            "repeats_the_reward_pays_pct": round(100 * paid / n, 2) if n else 0.0}


def perplexity(rows: list[dict], lm: fluency.KneserNeyLM) -> float:
    return round(fluency.perplexity(scoring.fluency_scores(lm, [r["decoded"].split()
                                                                for r in rows])), 2)


def summary(values: dict, rows: list[dict], lm: fluency.KneserNeyLM) -> dict:
    out = {m: round(float(np.mean(values[m])) * (100 if m == "repeat_content_word" else 1), 2)
           for m in MEASURES if m != "fluency"}
    out["fluency"] = perplexity(rows, lm)
    return out


def render(table: dict) -> str:
    """The arms' table and the tests' table as markdown."""
    extra = ("repeats_the_article_repeats_pct", "repeats_the_reward_pays_pct")
    head = ("| arm | " + " | ".join(LABELS[m] for m in MEASURES)
            + " | of the repeats: the article repeats the word % | the reward pays for % |")
    lines = [head, "|---" * (len(MEASURES) + 3) + "|"]
    for arm, v in table["arms"].items():
        lines.append(f"| {ARM_NAMES.get(arm, arm)} | "
                     + " | ".join(f"{v[m]:.2f}" for m in (*MEASURES, *extra)) + " |")
    ref = table["references"]
    lines.append("| the references | - | - | - | " + " | ".join(
        f"{ref[m]:.2f}" for m in ("repeat_content_word", "novel_words", "fluency")) + " | - | - |")
    lines += ["", "| B vs A | " + " | ".join(LABELS[m] for m in MEASURES) + " |",
              "|---" * (len(MEASURES) + 1) + "|"]
    for pair, tests in table["tests"].items():
        b, a = pair.split(":")
        # p_value: B's mean above A's, i.e. better on ROUGE and worse on the rest
        cells = [f"{tests[m]['delta']:+.2f} (p {fmt_p(tests[m]['p_value'])})" for m in MEASURES]
        lines.append(f"| {ARM_NAMES.get(b, b)} vs {ARM_NAMES.get(a, a)} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Deltas: ROUGE in points, the shares in percentage points, fluency in nats a "
              "token (the mean negative log-probability per token; the arms' table shows the "
              "perplexity). One-sided p, in the direction each target asks about: of B above A "
              "on ROUGE, of B worse than A (more repeats, more novel words, less fluent) on the "
              "rest; the paired bootstrap (10,000 resamples: 0.0001 is its floor), McNemar's "
              "exact test for the repeats. The JSON holds both directions."]
    return "\n".join(lines) + "\n"


def fmt_p(p: float) -> str:
    """Four decimals; below the bootstrap's floor of 1 / 10,001 (an exact test's), one
    significant figure."""
    return f"{p:.4f}" if p >= 9.5e-5 else f"{p:.0e}"


def present(compare: tuple[str, ...], results: str) -> tuple[str, ...]:
    """The comparisons of compare whose two arms both have decoded files in results."""
    arms = arm_files(results)
    return tuple(c for c in compare if all(x in arms for x in c.split(":")))


def write_table(results: str, data_dir: str, compare: tuple[str, ...] = DEFAULT_COMPARE,
                samples: int = 10_000, out_name: str = "measures",
                extra: dict[str, str] | None = None) -> dict:
    """measures_table, written as <results>/<out_name>.json (with the code and the CPU) and
    .md; returns the table."""
    table = measures_table(results, data_dir, compare, samples, extra)
    table.update(code=code_version(), cpu=cpu_flags())
    with open(os.path.join(results, out_name + ".json"), "w") as f:
        json.dump(table, f, indent=1)
    with open(os.path.join(results, out_name + ".md"), "w") as f:
        f.write(render(table))
    return table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--data_dir", required=True)
    p.add_argument("--compare", default=",".join(DEFAULT_COMPARE))
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--out_name", default="measures")
    p.add_argument("--arm", action="append", default=[], metavar="NAME=PATH",
                   help="one more arm: a decoded file of the same pairs from elsewhere")
    a = p.parse_args(argv)
    extra = dict(x.split("=", 1) for x in a.arm)
    table = write_table(a.results, a.data_dir, tuple(a.compare.split(",")), a.samples,
                        a.out_name, extra)
    print(render(table))
    emit("measures_table", {"examples": table["examples"], "arms": len(table["arms"])})


if __name__ == "__main__":
    main()
