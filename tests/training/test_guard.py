"""The gradients a training step applies (pgn_tf.training.guard.clip_and_guard) against
tf.clip_by_global_norm and a NumPy reference; under float16's loss scaling (apply_guarded), the
NaN guard and Keras's LossScaleOptimizer skip the same steps."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.training.guard import apply_guarded, clip_and_guard, scale_loss


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


def test_a_loss_scaled_non_finite_step_hands_on_nans_for_the_optimizer_to_skip():
    grads = _grads()
    got = clip_and_guard(grads, tf.constant(np.inf), tf.constant(False), 2.0, 1,
                         loss_scaled=True)
    assert np.isnan(got[0].numpy()).all() and np.isnan(got[1].values.numpy()).all()


def _step(optimizer, w, loss_fn, max_norm):
    """One training step as Trainer._step_fn takes it: the tape differentiates the scaled
    loss, apply_guarded clips, guards and applies."""

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(w)
            scaled = scale_loss(optimizer, loss)
        return apply_guarded(optimizer, tape.gradient(scaled, [w]), [w], loss, max_norm)

    return step


def test_loss_scaling_clips_and_applies_the_unscaled_gradient():
    """d loss / d w = [3, 4] (norm 5), clipped to norm 1: SGD at rate 1 moves w by [0.6, 0.8]
    with the loss scaled by 8 as without scaling; the reported norm is the unscaled 5."""
    moved = []
    for scaled in (True, False):
        w = keras.Variable([1.0, 2.0])
        optimizer = keras.optimizers.SGD(1.0)
        if scaled:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=8.0)
        optimizer.build([w])
        norm, finite = _step(optimizer, w, lambda w: tf.reduce_sum(w * [3.0, 4.0]), 1.0)()
        assert finite.numpy()
        np.testing.assert_allclose(norm.numpy(), 5.0, rtol=1e-6)
        moved.append(w.numpy())
        if scaled:
            assert (float(optimizer.dynamic_scale.numpy()), int(optimizer.step_counter.numpy())
                    ) == (8.0, 1)
    np.testing.assert_allclose(moved[0], [0.4, 1.2], rtol=1e-6)
    np.testing.assert_allclose(moved[0], moved[1], rtol=1e-6)


def test_float16_overflow_is_one_skip_for_the_guard_and_the_loss_scale():
    """A float16 gradient of 1000 x the scale overflows (float16 ends at 65504) until the
    scale is down to 64: the 9 steps before are non-finite to the guard (the loop counts
    them) and skipped whole by the optimizer, which halves its scale each time (Adam's step
    count and moments stay put: no zero update, unlike a non-finite step without scaling);
    the 10th applies the unscaled gradient."""
    w = keras.Variable([1.0, 2.0])
    inner = keras.optimizers.Adam(0.1)
    optimizer = keras.optimizers.LossScaleOptimizer(inner)  # initial scale 2^15
    optimizer.build([w])
    step = _step(optimizer, w, lambda w: tf.cast(
        tf.reduce_sum(tf.cast(w, tf.float16) * tf.constant(1000.0, tf.float16)), tf.float32),
        2.0)
    for k in range(9):
        norm, finite = step()
        assert not finite.numpy() and not np.isfinite(norm.numpy()), k
        assert float(optimizer.dynamic_scale.numpy()) == 2.0 ** (14 - k)
        assert int(inner.iterations.numpy()) == 0
        np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    norm, finite = step()
    assert finite.numpy() and float(optimizer.dynamic_scale.numpy()) == 64.0
    np.testing.assert_allclose(norm.numpy(), 1000.0 * np.sqrt(2.0), rtol=1e-3)
    assert int(inner.iterations.numpy()) == 1
    np.testing.assert_allclose(w.numpy(), [0.9, 1.9], rtol=1e-5)  # Adam's first step: lr
