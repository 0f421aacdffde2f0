"""Every model's weights survive a training checkpoint restored into the model alone (what
evaluate, summarize and export do: `model_dir.restore_model`). A layer the checkpoint's object
graph does not reach keeps its random initialisation without any error; the convolutional ABS
encoder's layers once did (held in a Python list), which made its decoding input-blind."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf.model_dir import restore_model
from pgn_tf.models import build_model
from pgn_tf.utils.errors import UserError

V, B, L, T = 40, 3, 9, 5


def features() -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(4, V, (B, L)).astype(np.int32)
    tgt = rng.integers(4, V, (B, T)).astype(np.int32)
    return {
        "enc_ids": tf.constant(ids), "enc_ext_ids": tf.constant(ids),
        "enc_len": tf.constant([L, L - 3, 2], tf.int32), "num_oovs": tf.zeros([B], tf.int32),
        "dec_input": tf.constant(np.concatenate([np.full((B, 1), 2), tgt[:, :-1]], 1)),
        "target": tf.constant(tgt), "dec_len": tf.constant([T, 3, 1], tf.int32),
    }


def tiny(preset: str, **model) -> config_lib.ModelConfig:
    cfg = config_lib.resolve(preset, [])
    cfg.model.hidden_dim, cfg.model.emb_dim = 8, 6
    for key, value in model.items():
        setattr(cfg.model, key, value)
    return cfg.model


MODELS = {
    "pointer-generator + coverage": lambda: tiny("see2017_coverage"),
    "deep reinforced": lambda: tiny("paulus2017"),
    "abs bow": lambda: tiny("rush2015_abs", abs_encoder="bow"),
    "abs conv": lambda: tiny("rush2015_abs", abs_encoder="conv"),
    "abs conv, normalised": lambda: tiny("rush2015_abs", abs_encoder="conv", abs_conv_norm=True),
    "abs attention": lambda: tiny("rush2015_abs", abs_encoder="attention"),
}


@pytest.mark.parametrize("name", MODELS)
def test_a_restored_model_has_every_trained_weight_and_the_same_outputs(name, tmp_path):
    f = features()
    tf.random.set_seed(1)
    trained = build_model(MODELS[name](), V)
    out = trained.token_log_probs(f, trained(f))
    optimizer = keras.optimizers.Adam()  # the training checkpoint holds one, as train's does
    optimizer.build(trained.trainable_variables)
    path = tf.train.Checkpoint(step=tf.Variable(1, dtype=tf.int64), model=trained,
                               optimizer=optimizer).save(str(tmp_path / "ckpt"))

    tf.random.set_seed(2)  # another initialisation: every weight must come from the checkpoint
    fresh = build_model(MODELS[name](), V)
    fresh(f)
    restore_model(fresh, path)
    assert len(fresh.trainable_variables) == len(trained.trainable_variables)
    for a, b in zip(trained.trainable_variables, fresh.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    np.testing.assert_allclose(fresh.token_log_probs(f, fresh(f)).numpy(), out.numpy(),
                               rtol=1e-6, atol=1e-6)


def test_a_checkpoint_that_lacks_some_of_the_model_is_a_clear_error(tmp_path):
    """The convolutions' checkpoints before the fix, or another encoder's: one error line."""
    f = features()
    bow = build_model(tiny("rush2015_abs", abs_encoder="bow"), V)
    bow(f)
    path = tf.train.Checkpoint(model=bow).save(str(tmp_path / "ckpt"))
    conv = build_model(tiny("rush2015_abs", abs_encoder="conv"), V)
    conv(f)
    with pytest.raises(UserError, match="does not hold every weight of this model"):
        restore_model(conv, path)
