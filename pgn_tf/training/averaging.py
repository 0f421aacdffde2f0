"""Checkpoint averaging, as OpenNMT-tf's `average_checkpoints`: the element-wise mean of the
model variables of a model dir's last N checkpoints, written as a new model dir (config.json,
vocab.txt, ckpt/ckpt-<step>; the optimizer left out) that `evaluate`, `summarize` and `export`
read like any other. `python -m pgn_tf.average_checkpoints` is its command."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil

import numpy as np
import tensorflow as tf

from pgn_tf.model_dir import ModelDir, restore_model
from pgn_tf.models import build_model
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf")


@dataclasses.dataclass
class Averaged:
    """An averaged checkpoint: its path, its step (the newest source's), the sources."""

    checkpoint: str
    step: int
    sources: list[str]


def average_checkpoints(model_dir: str, last: int, output: str) -> Averaged:
    """Averages the last `last` checkpoints of model_dir into the new model dir `output`.
    Raises UserError when model_dir holds fewer or `output` is not empty."""
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
    log.info("averaged %d checkpoints into %s", len(paths), saved)
    return Averaged(saved, step, paths)
