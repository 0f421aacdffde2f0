"""`python -m pgn_tf.tune`: ABS+ feature weights (Rush et al. 2015 section 5) by coordinate
ascent on validation ROUGE.

    python -m pgn_tf.tune --model_dir DIR --data validation.jsonl.gz [--skip 500] [--limit 300] \
        [--grid -1 -0.5 0 0.5 1 2] [--rounds 2] [--metric rougeLsum] [--set decode.KEY=VALUE]

Rush et al. tune alpha with MERT (Z-MERT); this tunes the same five weights with plain
coordinate ascent: alpha_0 (log p) stays 1, and each of the four indicator weights in turn takes
the grid value with the best ROUGE while the others are held, for --rounds passes. Simpler than
MERT (no n-best lists, no line search), and with four weights and a small grid it decodes the
tuning set only 4 x grid x rounds times, each in one batched in-graph beam search whose weights
are a tensor input (no retracing). Prints the weights as a `--set decode.abs_plus_weights=...`
value and writes them to <model_dir>/abs_plus.json.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.tune"))
import argparse
import json
import os

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import scoring
from pgn_tf.data import dataset
from pgn_tf.decoding.features import NUM_FEATURES
from pgn_tf.inference import Summarizer, tokens_to_sentences
from pgn_tf.utils import progress
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def make_scorer(summarizer: Summarizer, articles: list[str], references: list[str],
                metric: str, batch_size: int, on_decode=None):
    """score(weights) -> ROUGE of the articles decoded with those ABS+ weights; on_decode()
    is called after each full decode (the progress bar)."""
    fn = tf.function(lambda a, w: summarizer.summarize(a, feature_weights=w),
                     input_signature=[tf.TensorSpec([None], tf.string),
                                      tf.TensorSpec([NUM_FEATURES], tf.float32)])

    def score(weights: list[float]) -> float:
        decoded = []
        for i in range(0, len(articles), batch_size):
            out = fn(tf.constant(articles[i : i + batch_size]), tf.constant(weights, tf.float32))
            for row, n in zip(out["tokens"].numpy(), out["length"].numpy()):
                decoded.append(tokens_to_sentences([t.decode("utf-8") for t in row[:n]]))
        if on_decode is not None:
            on_decode()
        return scoring.rouge(decoded, references, bootstrap=0)[metric]

    return score


def coordinate_ascent(score, grid: list[float], rounds: int) -> tuple[list[float], float, list]:
    weights = [1.0] + [0.0] * (NUM_FEATURES - 1)
    best = score(weights)
    history = [(list(weights), best)]
    for _ in range(rounds):
        changed = False
        for k in range(1, NUM_FEATURES):
            for value in grid:
                if value == weights[k]:
                    continue
                trial = list(weights)
                trial[k] = value
                s = score(trial)
                history.append((trial, s))
                if s > best:
                    best, weights, changed = s, trial, True
        if not changed:
            break
    return weights, best, history


def run(args) -> dict:
    summarizer = Summarizer.from_model_dir(args.model_dir)
    # tuned under the decoding it will be used with (trigram blocking, fixed length, ...)
    config_lib.apply_decode_overrides(summarizer.cfg, args.set, "tune")
    examples = dataset.read_split(args.data, None, args.skip + args.limit)[args.skip:]
    if not examples:
        raise UserError(f"--data {args.data} has no examples after --skip {args.skip}")
    references = [scoring.reference_text(e.summary, summarizer.cfg.data) for e in examples]
    # Decodes at most: the start, then each round tries every grid value of 4 weights.
    most = 1 + args.rounds * (NUM_FEATURES - 1) * len(args.grid)
    bar = progress.progbar(most, "decode", 0 if args.quiet else None)
    score = make_scorer(summarizer, [e.article for e in examples], references, args.metric,
                        args.batch_size, on_decode=lambda: bar.add(1))
    weights, best, history = coordinate_ascent(score, args.grid, args.rounds)
    bar.update(len(history), finalize=True)  # fewer when a round changed nothing
    result = {"metric": args.metric, "abs": history[0][1], "abs_plus": best,
              "weights": ",".join(f"{w:g}" for w in weights), "examples": len(examples),
              "decodes": len(history), "method": "coordinate ascent"}
    with open(os.path.join(args.model_dir, "abs_plus.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))
    print(f"use: --set decode.abs_plus_weights={result['weights']}")
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.tune", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data", required=True, help="tuning (validation) data, any pgn_tf format")
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N examples (e.g. the ones evaluate scores)")
    p.add_argument("--grid", type=float, nargs="+", default=[-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--metric", default="rougeLsum", choices=("rouge1", "rouge2", "rougeLsum"))
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE",
                   help="decoding settings to tune under (as evaluate's --set)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.tune", run, build_parser().parse_args(argv))
