"""Training objectives: masked NLL (See et al. eq. 6-7) and the coverage loss (eq. 12-13)."""

from __future__ import annotations

import tensorflow as tf


def sequence_mask(lengths: tf.Tensor, maxlen, dtype=tf.float32) -> tf.Tensor:
    return tf.sequence_mask(lengths, maxlen, dtype=dtype)


def masked_average(values: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """Per-example mean over valid steps (eq. 7's 1/T). values [B, T], lengths [B] -> [B]."""
    mask = sequence_mask(lengths, tf.shape(values)[1], values.dtype)
    return tf.math.divide_no_nan(
        tf.reduce_sum(values * mask, axis=1), tf.cast(lengths, values.dtype)
    )


def nll_per_example(log_probs: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """Eq. 6-7: mean over steps of -log P(w*_t). log_probs [B, T] -> [B]."""
    return masked_average(-log_probs, lengths)


def coverage_loss_per_example(attn: tf.Tensor, coverage: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """Eq. 12 averaged over steps: covloss_t = sum_i min(a_i^t, c_i^t).

    attn, coverage: float [B, T, src_len] (coverage[t] = sum of attn over steps < t) -> [B].
    """
    step_loss = tf.reduce_sum(tf.minimum(attn, coverage), axis=-1)  # [B, T]
    return masked_average(step_loss, lengths)
