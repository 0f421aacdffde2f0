"""The gradient step's safety: the global-norm clip (See et al.: 2.0), the guard that drops a
step whose loss or gradient is not finite, and float16's loss scaling, as one pass over the
gradients (`clip_and_guard`) that `apply_guarded` feeds to the optimizer."""

from __future__ import annotations

import keras
import tensorflow as tf


def clip_and_guard(grads, norm, finite, max_norm: float, n: int = 1, loss_scaled: bool = False):
    """The gradients to apply: clipped to max_norm (train.max_grad_norm; See et al.: 2.0; 0: no
    clip) by their global norm `norm`, divided by the n replicas (Keras sums them again), and
    zero where the step is not finite (`finite`, a bool scalar). IndexedSlices stay sparse. A
    non-finite step is dropped: for SGD and Adagrad the weights do not move; Adam's momentum
    still carries them one step. The loop counts such steps and stops on a streak
    (train.max_nonfinite_steps).

    loss_scaled: the gradients are those of a loss scaled by a keras LossScaleOptimizer (float16,
    `apply_guarded`), which divides them by its scale when it applies them and skips a step
    whose gradients are not all finite, halving its scale. A non-finite step then hands on NaNs
    instead of zeros, so the optimizer sees the step the guard dropped as the overflow it is:
    it applies nothing (Adam's moments included) and lowers the scale. One test of finiteness
    for both, the guard's.

    One multiply per gradient by a scalar that folds the clip and 1/n together, under a
    tf.cond that hands on the zeros instead when the step is not finite: clip_by_global_norm,
    a tf.where and a division by n would each read and write every gradient (three passes
    over the 256 x 20k vocabulary kernel a step at the reference sizes)."""
    factor = tf.constant(1.0 / n, tf.float32)
    if max_norm > 0:
        factor = factor * tf.minimum(1.0, max_norm / tf.maximum(norm, 1e-30))
    values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]

    def scaled():
        if max_norm <= 0 and n == 1:
            return values  # nothing to scale
        return [v * tf.cast(factor, v.dtype) for v in values]

    def dropped():
        if loss_scaled:
            return [tf.fill(tf.shape(v), tf.constant(float("nan"), v.dtype)) for v in values]
        return [tf.zeros_like(v) for v in values]

    out = tf.cond(finite, scaled, dropped)
    return [tf.IndexedSlices(v, g.indices, g.dense_shape) if isinstance(g, tf.IndexedSlices)
            else v for g, v in zip(grads, out)]


def scale_loss(optimizer, loss):
    """loss times the optimizer's loss scale (a keras LossScaleOptimizer's), else loss: what
    the tape differentiates."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.scale_loss(loss)
    return loss


def apply_guarded(optimizer, grads, variables, loss, max_norm: float, n: int = 1):
    """Applies the gradients of `scale_loss(optimizer, loss)` (all-reduced over the n replicas
    already) through `clip_and_guard`; returns (global norm of the unscaled gradients, whether
    the step was finite). Under a LossScaleOptimizer the norm is divided by its scale before
    the clip (the scaled gradients go to the optimizer, which unscales them)."""
    norm = tf.linalg.global_norm(grads)
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    if loss_scaled:
        norm = norm / optimizer.dynamic_scale
    finite = tf.math.is_finite(norm) & tf.math.is_finite(loss)
    grads = clip_and_guard(grads, norm, finite, max_norm, n, loss_scaled)
    optimizer.apply_gradients(zip(grads, variables))
    return norm, finite
