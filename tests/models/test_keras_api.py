"""The Keras API of the models: `.keras` save / load round trips, and `model.fit` gradients under
MirroredStrategy equal to a single device's."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.models.abs import ABS
from pgn_tf.models.deep_reinforced import DeepReinforced
from pgn_tf.models.pointer_generator import PointerGenerator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V = 20


def features():
    rng = np.random.default_rng(0)
    ext = rng.integers(4, V + 1, (2, 6))
    return {"enc_ids": tf.constant(np.where(ext >= V, 1, ext), tf.int32),
            "enc_ext_ids": tf.constant(ext, tf.int32), "enc_len": tf.constant([6, 4]),
            "num_oovs": tf.constant([1, 1]),
            "dec_input": tf.constant(rng.integers(4, V, (2, 4)), tf.int32),
            "target": tf.constant(rng.integers(4, V, (2, 4)), tf.int32),
            "dec_len": tf.constant([4, 2])}


@pytest.mark.parametrize("make", [
    lambda: PointerGenerator(V, 6, 4, coverage=True, name="pgn"),
    lambda: DeepReinforced(V, hidden_dim=4, emb_dim=3, sample_replace_prob=0.0, name="paulus"),
    lambda: ABS(V, hidden_dim=6, emb_dim=4, window=3, encoder="conv", name="abs"),
])
def test_keras_file_round_trip_gives_identical_outputs(make, tmp_path):
    model = make()
    for v in model.trainable_variables:  # not the init: a trained-looking model
        v.assign(tf.random.normal(v.shape, stddev=0.3, seed=1))
    f = features()
    want = model(f)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    got = loaded(f)
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-6, err_msg=key)


FIT_ON_REPLICAS = r"""
import json, sys
import numpy as np, tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from pgn_tf import objectives
from pgn_tf.models.pointer_generator import PointerGenerator

rng = np.random.default_rng(0)
V, B = 30, 8
ext = rng.integers(4, V + 2, (B, 7))
data = {"enc_ids": np.where(ext >= V, 1, ext).astype("int32"), "enc_ext_ids": ext.astype("int32"),
        "enc_len": rng.integers(1, 8, B).astype("int32"), "num_oovs": np.full(B, 2, "int32"),
        "dec_input": rng.integers(4, V, (B, 5)).astype("int32"),
        "target": rng.integers(4, V + 2, (B, 5)).astype("int32"),
        "dec_len": rng.integers(1, 6, B).astype("int32")}

def one_step(strategy):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = PointerGenerator(V, 8, 6, coverage=True)
        model.compile(optimizer=keras.optimizers.SGD(0.5), objective=objectives.MaximumLikelihood())
    ds = tf.data.Dataset.from_tensors(data)
    model.fit(ds, epochs=1, verbose=0)
    return [v.numpy() for v in model.trainable_variables]

two = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
assert two.num_replicas_in_sync == 2
a, b = one_step(two), one_step(tf.distribute.get_strategy())
print(json.dumps({"max_diff": max(float(np.abs(x - y).max()) for x, y in zip(a, b)),
                  "replicas": two.num_replicas_in_sync}))
"""


@pytest.mark.slow
def test_fit_on_two_replicas_equals_one_device():
    """Keras sums the replicas' gradients, so train_step scales each replica's loss by the
    global batch: one step of fit on 2 logical CPU devices equals one step on one device."""
    proc = subprocess.run([sys.executable, "-c", FIT_ON_REPLICAS], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT),
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["max_diff"] < 1e-5, result
