"""`python -m pgn_tf.average_checkpoints`: average the weights of a model dir's last checkpoints.

    python -m pgn_tf.average_checkpoints --model_dir runs/pgn --last 5 --output runs/pgn_avg5

Writes a new model dir (config.json, vocab.txt, ckpt/ckpt-<step>) whose one checkpoint holds the
element-wise mean of the model variables of the last N checkpoints in <model_dir>/ckpt (the
optimizer is left out), as OpenNMT-tf's `average_checkpoints` does; `evaluate`, `summarize` and
`export` read it like any model dir. Keep at least N checkpoints while training
(train.keep_checkpoints).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.average_checkpoints"))
import argparse
import os
import shutil

import numpy as np
import tensorflow as tf

from pgn_tf.model_dir import ModelDir, restore_model
from pgn_tf.models import build_model
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def average(model_dir: str, last: int, output: str) -> str:
    """Averages the last `last` checkpoints of model_dir into the model dir `output`; returns
    the path of the averaged checkpoint."""
    if last < 1:
        raise UserError(f"--last must be at least 1, got {last}")
    src = ModelDir(model_dir)
    cfg = src.read_config()
    state = tf.train.get_checkpoint_state(src.ckpt_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if len(paths) < last:
        raise UserError(f"{src.ckpt_dir} holds {len(paths)} checkpoint(s), fewer than --last "
                        f"{last} (keep more with train.keep_checkpoints)")
    if os.path.exists(output) and os.listdir(output):
        raise UserError(f"--output {output} exists and is not empty")
    paths = paths[-last:]
    vocab = src.read_vocab(cfg)
    model = build_model(cfg.model, vocab.size)
    # The floating-point weights are averaged; integer state (dropout seeds) is the last's.
    weights = [v for v in model.variables if np.issubdtype(np.dtype(v.dtype), np.floating)]
    sums = None
    for path in paths:
        restore_model(model, path)
        values = [v.numpy().astype(np.float64) for v in weights]
        sums = values if sums is None else [s + v for s, v in zip(sums, values)]
    for var, total in zip(weights, sums):
        var.assign((total / len(paths)).astype(np.dtype(var.dtype)))
    step = int(paths[-1].rsplit("-", 1)[1])
    dst = ModelDir(output)
    os.makedirs(dst.ckpt_dir, exist_ok=True)
    ckpt = tf.train.Checkpoint(step=tf.Variable(step, dtype=tf.int64), model=model)
    saved = tf.train.CheckpointManager(ckpt, dst.ckpt_dir, 1, checkpoint_name="ckpt").save(
        checkpoint_number=step)
    dst.write_config(cfg)
    shutil.copy(src.vocab_path, dst.vocab_path)
    names = ", ".join(os.path.basename(p) for p in paths)
    print(f"[pgn_tf] averaged {len(paths)} checkpoints ({names}) into {saved}")
    return saved


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.average_checkpoints",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--last", type=int, default=5, help="how many of the latest checkpoints")
    p.add_argument("--output", required=True, help="the new model dir")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("pgn_tf.average_checkpoints", average, args.model_dir, args.last,
                   args.output)
