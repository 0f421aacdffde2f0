"""`python -m pgn_tf.average_checkpoints`: average the weights of a model dir's last checkpoints.

    python -m pgn_tf.average_checkpoints --model_dir runs/pgn --last 5 --output runs/pgn_avg5

Writes a new model dir (config.json, vocab.txt, ckpt/ckpt-<step>) whose one checkpoint holds the
element-wise mean of the model variables of the last N checkpoints in <model_dir>/ckpt
(pgn_tf.training.averaging, the library call); `evaluate`, `summarize` and `export` read it like
any model dir. Keep at least N checkpoints while training
(train.keep_checkpoints).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.average_checkpoints"))
import argparse
import os

from pgn_tf.training.averaging import average_checkpoints
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.average_checkpoints",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--last", type=int, default=5, help="how many of the latest checkpoints")
    p.add_argument("--output", required=True, help="the new model dir")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)

    def average() -> None:
        done = average_checkpoints(a.model_dir, a.last, a.output)
        names = ", ".join(os.path.basename(p) for p in done.sources)
        print(f"[pgn_tf] averaged {len(done.sources)} checkpoints ({names}) into "
              f"{done.checkpoint}")

    return run_cli("pgn_tf.average_checkpoints", average)
