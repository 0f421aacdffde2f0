"""`python -m pgn_tf.tune`: ABS+ feature weights (Rush et al. 2015 section 5) by coordinate
ascent on validation ROUGE.

    python -m pgn_tf.tune --model_dir DIR --data validation.jsonl.gz [--skip 500] [--limit 300] \
        [--grid -1 -0.5 0 0.5 1 2] [--rounds 2] [--metric rougeLsum] [--set decode.KEY=VALUE]

Rush et al. tune alpha with MERT (Z-MERT); this tunes the same five weights with plain
coordinate ascent: alpha_0 (log p) stays 1, and each of the four indicator weights in turn takes
the grid value with the best ROUGE while the others are held, for --rounds passes. Simpler than
MERT (no n-best lists, no line search), and with four weights and a small grid it decodes the
tuning set only 4 x grid x rounds times, each in one batched in-graph beam search whose weights
are a tensor input (no retracing). Writes them to <model_dir>/abs_plus.json, where summarize,
evaluate and export find them (unless given --set decode.abs_plus_weights=...), and prints the
result as one JSON line. The library call underneath is `pgn_tf.inference.tuning.tune`.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.tune"))
import argparse
import json

from pgn_tf.inference import tuning
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.tune", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data", required=True, help="tuning (validation) data, any pgn_tf format")
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N examples (e.g. the ones evaluate scores)")
    p.add_argument("--grid", type=float, nargs="+", default=list(tuning.GRID))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--metric", default="rougeLsum", choices=tuning.METRICS)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE",
                   help="decoding settings to tune under (as evaluate's --set)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, calls pgn_tf.inference.tuning.tune and prints its result as one JSON
    line; 2 on an error the user can fix."""
    a = build_parser().parse_args(argv)

    def tune() -> None:
        result = tuning.tune(a.model_dir, a.data, limit=a.limit, skip=a.skip, grid=a.grid,
                      rounds=a.rounds, metric=a.metric, batch_size=a.batch_size,
                      overrides=a.set, show_progress=not a.quiet)
        print(json.dumps(result.as_dict()))

    with logs.to_stdout():
        return run_cli("pgn_tf.tune", tune)
