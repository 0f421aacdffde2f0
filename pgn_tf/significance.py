"""Is system B better than system A on the same examples? A paired bootstrap test of ROUGE.

    python -m pgn_tf.significance A/decoded.jsonl B/decoded.jsonl [--metric rougeLsum]

Reads two `decoded.jsonl` files (or their .gz) written by `pgn_tf.evaluate` for the same
examples in the same order and prints the test's result as one JSON line (the library:
pgn_tf.metrics.significance.compare).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.significance"))
import argparse
import json

from pgn_tf.metrics.significance import METRICS, compare
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
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("pgn_tf.significance",
                   lambda: print(json.dumps(compare(args.a, args.b, args.metric, args.samples))))
