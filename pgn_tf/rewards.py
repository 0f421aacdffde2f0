"""The ROUGE-L reward of Paulus et al. (2017) section 3.2, in the graph.

ROUGE-L F1 (Lin 2004; rouge-score's `rougeL` with beta = 1) between token-id sequences:
    P = LCS / |pred|,  R = LCS / |ref|,  F = 2PR / (P + R).

The longest common subsequence is the usual dynamic programme, one row per predicted token and
vectorised over the batch and the reference:
    cand[j]  = max(dp[i-1][j], dp[i-1][j-1] + [pred_i == ref_j])
    dp[i][j] = max(cand[j], dp[i][j-1]) = max_{k<=j} cand[k]
so each row is a cumulative max, computed in log2(|ref|) shifted maxima. No Python per example:
the reward runs inside the tf.function training step (benchmarks: README "Performance").
"""

from __future__ import annotations

import tensorflow as tf


def _cummax(x: tf.Tensor) -> tf.Tensor:
    """Cumulative max along the last axis (Hillis-Steele scan) of non-negative x: [B, N]."""
    n = tf.shape(x)[1]
    shift = tf.constant(1)

    def body(shift, x):
        shifted = tf.concat([tf.zeros_like(x[:, :shift]), x[:, : n - shift]], axis=1)
        return shift * 2, tf.maximum(x, shifted)

    _, x = tf.while_loop(lambda s, _: s < n, body, (shift, x))
    return x


def lcs_length(pred: tf.Tensor, pred_len: tf.Tensor, ref: tf.Tensor, ref_len: tf.Tensor):
    """Length of the LCS of each pair. pred: int [B, Tp]; ref: int [B, Tr]; *_len: int [B].
    Returns float32 [B]."""
    pred = tf.cast(pred, tf.int32)
    ref = tf.cast(ref, tf.int32)
    tr = tf.shape(ref)[1]
    ref_valid = tf.range(tr)[None, :] < ref_len[:, None]  # [B, Tr]
    dp = tf.zeros(tf.shape(ref), tf.float32)  # row i-1, dp[i-1][j] for j = 1..Tr

    def body(i, dp):
        token = pred[:, i]  # [B]
        live = (i < pred_len)[:, None]  # rows past the prediction's end change nothing
        match = tf.cast(tf.equal(ref, token[:, None]) & ref_valid, tf.float32)
        diag = tf.pad(dp[:, :-1], [[0, 0], [1, 0]])  # dp[i-1][j-1]
        cand = tf.maximum(dp, diag + match)
        return i + 1, tf.where(live, _cummax(cand), dp)

    _, dp = tf.while_loop(lambda i, _: i < tf.shape(pred)[1], body, (tf.constant(0), dp))
    # dp is non-decreasing along j, and cells past ref_len hold dp[ref_len] (no match there).
    return tf.reduce_max(dp, axis=1)


def rouge_l_f1(pred, pred_len, ref, ref_len) -> tf.Tensor:
    """ROUGE-L F1 in [0, 1] per pair (0 when either side is empty). Shapes as lcs_length."""
    lcs = lcs_length(pred, pred_len, ref, ref_len)
    p = tf.math.divide_no_nan(lcs, tf.cast(pred_len, tf.float32))
    r = tf.math.divide_no_nan(lcs, tf.cast(ref_len, tf.float32))
    return tf.math.divide_no_nan(2.0 * p * r, p + r)
