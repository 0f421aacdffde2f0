"""The gradients a training step applies (pgn_tf.trainer.clip_and_guard) against
tf.clip_by_global_norm and a NumPy reference."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.trainer import clip_and_guard


def _grads(scale: float = 1.0):
    rng = np.random.default_rng(0)
    dense = tf.constant(rng.normal(size=(3, 4)).astype("float32") * scale)
    sparse = tf.IndexedSlices(tf.constant(rng.normal(size=(2, 4)).astype("float32") * scale),
                              tf.constant([4, 1]), tf.constant([6, 4]))
    return [dense, sparse]


@pytest.mark.parametrize("max_norm, n, scale", [(2.0, 1, 5.0), (2.0, 1, 0.1), (2.0, 3, 5.0),
                                                (0.0, 1, 5.0), (0.0, 2, 5.0)])
def test_clip_and_replica_division_match_the_library(max_norm, n, scale):
    grads = _grads(scale)
    norm = tf.linalg.global_norm(grads)
    got = clip_and_guard(grads, norm, tf.constant(True), max_norm, n)
    want = tf.clip_by_global_norm(grads, max_norm, use_norm=norm)[0] if max_norm > 0 else grads
    assert isinstance(got[1], tf.IndexedSlices)  # the embedding's gradient stays sparse
    np.testing.assert_array_equal(got[1].indices.numpy(), [4, 1])
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy() / n, rtol=1e-6)
    np.testing.assert_allclose(got[1].values.numpy(), want[1].values.numpy() / n, rtol=1e-6)
    if max_norm > 0 and scale > 1:  # the clip acted: the applied norm is max_norm / n
        np.testing.assert_allclose(tf.linalg.global_norm(got).numpy(), max_norm / n, rtol=1e-5)


def test_a_non_finite_step_applies_zeros_sparse_and_dense():
    grads = _grads()
    grads[0] = tf.tensor_scatter_nd_update(grads[0], [[0, 0]], [np.nan])
    norm = tf.linalg.global_norm(grads)
    finite = tf.math.is_finite(norm)
    got = clip_and_guard(grads, norm, finite, 2.0, 1)
    assert not finite.numpy()
    np.testing.assert_array_equal(got[0].numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(got[1].values.numpy(), np.zeros((2, 4)))


def test_compiled_like_the_training_step():
    """Inside tf.function (the training step's graph) the tf.cond picks per call."""
    fn = tf.function(lambda g, ok: clip_and_guard([g], tf.linalg.global_norm([g]), ok, 1.0, 1))
    g = tf.constant([3.0, 4.0])
    np.testing.assert_allclose(fn(g, tf.constant(True))[0].numpy(), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(fn(g, tf.constant(False))[0].numpy(), [0.0, 0.0])
