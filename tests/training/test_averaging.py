"""Checkpoint averaging: the mean of the last N checkpoints' model variables, a model dir that
evaluate and export read."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.model_dir import ModelDir, restore_model
from pgn_tf.models import build_model
from pgn_tf.training.averaging import average_checkpoints
from pgn_tf.utils.errors import UserError


def test_average_of_the_last_checkpoints_is_a_loadable_model_dir(trained_model_dir, tmp_path):
    mdir = ModelDir(trained_model_dir)
    paths = tf.train.get_checkpoint_state(mdir.ckpt_dir).all_model_checkpoint_paths[-2:]
    cfg = mdir.read_config()
    model = build_model(cfg.model, mdir.read_vocab(cfg).size)
    values = []
    for p in paths:
        restore_model(model, p)
        values.append([v.numpy() for v in model.trainable_variables])
    out = str(tmp_path / "avg")
    saved = average_checkpoints(trained_model_dir, 2, out).checkpoint
    got_cfg, _, averaged, path = ModelDir(out).load_model()
    assert path == saved and got_cfg.to_dict() == cfg.to_dict()
    assert not any("optimizer" in n for n, _ in tf.train.list_variables(saved))
    moved = 0
    for i, var in enumerate(averaged.trainable_variables):
        np.testing.assert_allclose(var.numpy(), (values[0][i] + values[1][i]) / 2, rtol=1e-6,
                                   atol=1e-7, err_msg=var.path)
        moved += not np.allclose(values[0][i], values[1][i])
    assert moved  # the two checkpoints differ, so the mean is a new point


def test_too_few_checkpoints_is_a_clear_error(trained_model_dir, tmp_path):
    with pytest.raises(UserError, match="fewer than --last 50"):
        average_checkpoints(trained_model_dir, 50, str(tmp_path / "x"))
