"""Is system B better than system A on the same examples? A paired test of one measure.

    python -m pgn_tf.significance A/decoded.jsonl B/decoded.jsonl [--metric rougeLsum]
    python -m pgn_tf.significance A B --metric repeat_content_word
    python -m pgn_tf.significance A B --metric novel_words --data VALIDATION
    python -m pgn_tf.significance A B --metric fluency --fluency_data TRAIN

Reads two `decoded.jsonl` files (or their .gz) written by `pgn_tf.evaluate` for the same
examples in the same order and prints the test's result as one JSON line (the library:
pgn_tf.metrics.significance.compare, which says what each measure is). The articles and the
references are tokenized under the default config's data section, or --model_dir's.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.significance"))
import argparse
import json

from pgn_tf.metrics.significance import METRICS, compare_with_data
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.significance",
                                description=__doc__.splitlines()[0])
    p.add_argument("a", help="decoded.jsonl of system A (the baseline)")
    p.add_argument("b", help="decoded.jsonl of system B (the printed p_value is one-sided: the "
                             "share of resamples in which B's mean is not above A's)")
    p.add_argument("--metric", default="rougeLsum", choices=METRICS)
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--data", help="the split the rows decode (novel_words: their articles, "
                                  "matched by id)")
    p.add_argument("--fluency_data", metavar="TRAIN_PATH",
                   help="the training split (fluency: its reference summaries fit the model)")
    p.add_argument("--model_dir", help="whose config's data section tokenizes (default: the "
                                       "default config's)")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return run_cli("pgn_tf.significance", lambda: print(json.dumps(compare_with_data(
        a.a, a.b, a.metric, a.samples, data=a.data, fluency_data=a.fluency_data,
        model_dir=a.model_dir))))
