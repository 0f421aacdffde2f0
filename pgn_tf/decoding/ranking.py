"""How beam search ranks hypotheses: the length normalisation (See et al.'s average
log-probability, or GNMT's length penalty), GNMT's coverage penalty (Wu et al. 2016), and which
candidates recombination merges (Rush et al. 2015)."""

from __future__ import annotations

import tensorflow as tf


def length_norm(emitted: tf.Tensor, alpha: float) -> tf.Tensor:
    """The divisor of a hypothesis' log-probability. emitted: tokens after [START] ([STOP]
    included when finished). alpha = 0: len(tokens) with [START], as See et al.'s avg_log_prob;
    alpha > 0: GNMT's ((5 + |Y|) / 6)^alpha."""
    emitted = tf.cast(emitted, tf.float32)
    if alpha and alpha > 0:
        return tf.pow((5.0 + emitted) / 6.0, alpha)
    return emitted + 1.0


def gnmt_coverage_penalty(attn_sum: tf.Tensor, beta: float) -> tf.Tensor:
    """Wu et al. (2016) eq. 14: beta * sum_i log(min(sum_t a_t,i, 1)). attn_sum: float
    [..., L] -> [...]; positions with a zero sum (padding) contribute 0."""
    logs = tf.math.log(tf.minimum(tf.maximum(attn_sum, 1e-30), 1.0))
    return beta * tf.reduce_sum(tf.where(attn_sum > 0, logs, 0.0), axis=-1)


def recombined(cand_seq, is_stop, valid, step, window: int):
    """bool [b, P]: live candidate j is merged into a better live candidate i < j (top_k order)
    whose last `window` ids are the same (Rush et al. 2015, hypothesis recombination)."""
    pos = step - window + 1 + tf.range(window)  # the window's positions, [C]
    last = tf.gather(cand_seq, tf.maximum(pos, 0), axis=2)  # [b, P, C]
    same = tf.reduce_all(
        tf.equal(last[:, :, None, :], last[:, None, :, :]) | (pos < 0), axis=-1
    )  # [b, P, P]; positions before the first token are [START] for every hypothesis
    p = tf.shape(cand_seq)[1]
    earlier = tf.range(p)[:, None] < tf.range(p)[None, :]  # i < j
    live = valid & ~is_stop
    return tf.reduce_any(same & earlier[None] & live[:, :, None], axis=1) & live
