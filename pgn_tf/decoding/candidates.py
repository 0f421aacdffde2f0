"""A step's best candidates (hypothesis, token) of each article from a dense distribution,
without a top_k over the full [b, K * W] sums (beam search's candidate pool)."""

from __future__ import annotations

import tensorflow as tf


def row_top_k(x: tf.Tensor, k, chunk: int = 32):
    """(values, columns) of the k largest entries of each row of x float [N, W], best first,
    k <= W: the k best lie among the k chunks of `chunk` columns with the highest maxima (a
    chunk's maximum bounds its members), so one full-width pass (the chunks' maxima) and a
    top_k over k * chunk columns replace a top_k over W."""
    n, width = tf.shape(x)[0], tf.shape(x)[1]
    chunks = (width + chunk - 1) // chunk
    padded = tf.cond(tf.equal(width % chunk, 0), lambda: x,
                     lambda: tf.pad(x, [[0, 0], [0, chunks * chunk - width]],
                                    constant_values=float("-inf")))
    blocks = tf.reshape(padded, [n, chunks, chunk])
    _, best_chunks = tf.math.top_k(tf.reduce_max(blocks, axis=2),
                                   k=tf.minimum(k, chunks))  # [N, C']
    picked = tf.reshape(tf.gather(blocks, best_chunks, batch_dims=1), [n, -1])  # [N, C' * c]
    values, pos = tf.math.top_k(picked, k=k)
    return values, tf.gather(best_chunks, pos // chunk, batch_dims=1) * chunk + pos % chunk


def merge_rows(row_scores, row_tokens, alive_logp, pool):
    """The `pool` best (hypothesis, token) of each article from each hypothesis' own best:
    row_scores float [b*K, R] (log-probs, best first), row_tokens int32 [b*K, R]."""
    b, k = tf.shape(alive_logp)[0], tf.shape(alive_logp)[1]
    per_row = tf.shape(row_scores)[1]
    sums = tf.reshape(tf.reshape(row_scores, [b, k, per_row]) + alive_logp[:, :, None],
                      [b, k * per_row])
    scores, idx = tf.math.top_k(sums, k=tf.minimum(pool, k * per_row))  # [b, P]
    beam = idx // per_row
    token = tf.gather(tf.reshape(row_tokens, [b, k * per_row]), idx, batch_dims=1)
    return scores, beam, token


def top_candidates(log_probs: tf.Tensor, alive_logp: tf.Tensor, pool, chunk: int = 32):
    """The `pool` best candidates (hypothesis, token) of each article by summed log-prob.

    log_probs: float [b*K, W]; alive_logp: float [b, K]. Returns (scores float [b, P], beam
    int32 [b, P], token int32 [b, P]), best first, P = min(pool, K * min(pool, W)).

    Equal to top_k over the [b, K * W] sums (up to the order of exactly equal scores), with less
    work: a hypothesis' own P best tokens are found by `row_top_k`, and alive_logp, the same
    for a whole row, is added to those P only.
    """
    row_scores, row_tokens = row_top_k(
        log_probs, tf.minimum(pool, tf.shape(log_probs)[1]), chunk)
    return merge_rows(row_scores, row_tokens, alive_logp, pool)
