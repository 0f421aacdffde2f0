"""log softmax(logits)[target] with its gradient written out (model.rnn_impl = "fused"): the
vocabulary half of the training loss (pgn_tf.layers.pointer.vocab_log_prob)."""

from __future__ import annotations

import tensorflow as tf


@tf.custom_gradient
def log_softmax_at(logits: tf.Tensor, target: tf.Tensor):
    """log softmax(logits)[target] of each row: logits float32 [N, V], target int32 [N] (< V).

    Its gradient is written out, g (onehot(target) - softmax(logits)), from the exponentials
    the forward pass computed: autodiff would differentiate the gather into a dense [N, V]
    segment sum and add it to the log-sum-exp's gradient, two more full-width passes
    (docs/performance.md). Training only: no exported graph holds it (a custom gradient saved
    into an export is registered process-wide when loaded; bincount_grad says why that
    matters)."""
    top = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
    exp = tf.exp(logits - top)
    total = tf.reduce_sum(exp, axis=-1)
    out = tf.gather(logits, target, batch_dims=1) - (tf.math.log(total) + top[:, 0])

    def grad(g):
        rows = tf.stack([tf.range(tf.shape(target)[0]), target], axis=1)
        return tf.tensor_scatter_nd_add(exp * (-g / total)[:, None], rows, g), None

    return out, grad
