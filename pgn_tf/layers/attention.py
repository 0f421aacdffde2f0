"""Bahdanau attention with See et al.'s coverage feature.

See et al. (2017) eq. 1-3 and 11:
    e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn)     (11; eq. 1 without w_c)
    a^t   = softmax(e^t)                                          (2), masked to the article
    h*_t  = sum_i a_i^t h_i                                       (3)
"""

from __future__ import annotations

import keras
import tensorflow as tf


def masked_softmax(scores: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Softmax over the last axis restricted to mask; all-zero (not NaN) where mask is empty.

    scores: float [..., n]; mask: bool [..., n]. Masked scores become the dtype's lowest finite
    value (-1e9 would be -inf in float16, and a row of -inf a NaN softmax).
    """
    scores = tf.where(mask, scores, tf.constant(scores.dtype.min, scores.dtype))
    probs = tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype)
    return tf.math.divide_no_nan(probs, tf.reduce_sum(probs, axis=-1, keepdims=True))


class BahdanauAttention(keras.layers.Layer):
    """Additive attention over encoder states, optionally informed by coverage.

    Args:
      attn_dim: size of the score space (See et al.: 2H = 512).
      use_coverage: adds w_c c_i^t to the score (eq. 11). w_c starts at zero, so converting a
        trained model to coverage leaves its attention unchanged at first.

    Call args (see `precompute` for enc_features):
      enc_features: float32 [batch, src_len, attn_dim] = W_h h_i, computed once per article.
      enc_outputs: float32 [batch, src_len, 2H]; enc_mask: bool [batch, src_len].
      query: float32 [batch, query_dim], the decoder state s_t (See et al.'s code: [c; h]).
      coverage: float32 [batch, src_len] or None.
    Returns:
      context: float32 [batch, 2H]; attn: float32 [batch, src_len].

    Example:
      >>> att = BahdanauAttention(8, use_coverage=True)
      >>> att.build((None, None, 8), 6)
      >>> feats = att.precompute(tf.zeros([2, 5, 8]))
    """

    def __init__(self, attn_dim: int, use_coverage: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.attn_dim = attn_dim
        self.use_coverage = use_coverage
        self.w_h = keras.layers.Dense(attn_dim, use_bias=False, name="w_h")
        self.w_s = keras.layers.Dense(attn_dim, use_bias=True, name="w_s")  # bias = b_attn

    def build(self, enc_shape, query_dim: int):
        self.w_h.build(enc_shape)
        self.w_s.build((None, query_dim))
        self.v = self.add_weight(shape=(self.attn_dim,), initializer="glorot_uniform", name="v")
        if self.use_coverage:
            self.w_c = self.add_weight(shape=(self.attn_dim,), initializer="zeros", name="w_c")
        self.built = True

    def precompute(self, enc_outputs):
        return self.w_h(enc_outputs)

    def _coverage_term(self, coverage, dtype, shape):
        """c_i^t w_c (eq. 11) as [B*L, 1] x [1, A], reshaped to `shape`."""
        w_c = tf.cast(self.w_c, dtype)
        return tf.reshape(tf.matmul(tf.reshape(coverage, [-1, 1]), w_c[None, :]), shape)

    def alignment(self, enc_features, enc_mask, query, coverage=None, beams: bool = False):
        """a^t alone (eq. 11 and 2), float [B, L]: what a loop over steps needs when the
        context (eq. 3) is formed after it. expand_dims, not [:, None]: a strided slice's
        gradient costs a kernel of its own every step. v^T tanh(.) and c_i w_c are plain
        matmuls over the [B*L] positions ([B*L, A] x [A, 1] and [B*L, 1] x [1, A]), not a
        multiply and a sum / a broadcast multiply (one kernel each way, where a multiply's
        gradient is a multiply, a sum and a broadcast), nor batched matmuls against a
        broadcast [1, A, 1] weight (oneDNN's batched matmuls and the sum over B their weight
        gradients need made the training step slower: docs/results/index.md "Performance").

        beams: enc_features holds each article once, [b, L, A], and the B = b*K rows of
        query, coverage and enc_mask are its K hypotheses in turn (a beam search's rows):
        W_h h_i is broadcast over them instead of tiled (K times less memory held). There the
        sum is formed in one [B, L, A] buffer, the largest of a search step: c_i w_c first,
        then W_h h_i and W_s s_t added into it (each add takes over its full-size input's
        buffer). The Snapshot between the adds (a no-op that hands its input on) keeps
        grappler's arithmetic optimizer from regrouping them to add the two small operands
        first, which would hold two such buffers at once. Nothing else reads the sum (its
        [B, L] shape comes from the mask): a Shape op still to run on it would keep tanh from
        taking its buffer over, which happened or not with the executor's order."""
        q = self.w_s(query)  # [B, A]
        covered = self.use_coverage and coverage is not None
        if beams:
            a = tf.shape(enc_features)
            feats = tf.expand_dims(enc_features, 1)  # [b, 1, L, A]
            if covered:  # c_i w_c first, then the two broadcast adds into its buffer
                feats = tf.raw_ops.Snapshot(input=self._coverage_term(
                    coverage, feats.dtype, [a[0], -1, a[1], a[2]]) + feats)
            feats = tf.reshape(feats + tf.reshape(q, [a[0], -1, 1, a[2]]),
                               [-1, a[1], a[2]])  # [b, K, L, A] -> [B, L, A]
        else:
            feats = enc_features + tf.expand_dims(q, 1)  # [B, L, A]
            if covered:
                feats = feats + self._coverage_term(coverage, feats.dtype,
                                                    tf.shape(enc_features))
        v = tf.cast(self.v, feats.dtype)
        scores = tf.matmul(tf.reshape(tf.tanh(feats), [-1, self.attn_dim]), v[:, None])
        return masked_softmax(tf.reshape(scores, tf.shape(enc_mask)), enc_mask)  # [B, L]

    def call(self, enc_features, enc_outputs, enc_mask, query, coverage=None,
             beams: bool = False):
        """beams: enc_features and enc_outputs hold each article once ([b, L, ...]) for the
        b*K rows of the rest (`alignment`)."""
        attn = self.alignment(enc_features, enc_mask, query, coverage, beams)
        if beams:
            b, d = tf.shape(enc_outputs)[0], tf.shape(enc_outputs)[2]
            context = tf.reshape(  # [b, K, L] x [b, L, D] -> [B, D]
                tf.matmul(tf.reshape(attn, [b, -1, tf.shape(attn)[1]]), enc_outputs), [-1, d])
        else:
            context = tf.einsum("bl,bld->bd", attn, enc_outputs)
        return context, attn

    def get_config(self):
        config = super().get_config()
        config.update(attn_dim=self.attn_dim, use_coverage=self.use_coverage)
        return config


class IntraTemporalAttention(keras.layers.Layer):
    """Paulus et al. (2017) section 2.1: bilinear attention over the encoder states, normalised
    over time so input tokens attended in earlier steps are penalised:

        e_ti   = h_t^d^T W_attn^e h_i^e                                     (2)
        e'_ti  = exp(e_ti)                         if t = 1                 (3)
               = exp(e_ti) / sum_{j<t} exp(e_ji)   otherwise
        a_ti^e = e'_ti / sum_i e'_ti                                        (4)
        c_t^e  = sum_i a_ti^e h_i^e                                         (5)

    Computed in log space: a_t = softmax_i(e_ti - lse_{j<t}(e_ji)), with the running
    log-sum-exp of past scores carried in the decoder state, so no exp() overflows on long
    articles. With temporal=False it is plain bilinear attention (softmax of eq. 2).

    Args:
      query_dim: size of h_t^d; temporal: eq. 3 on/off.
    Call args:
      enc_features: float32 [B, L, query_dim] = W_attn^e h_i^e (precompute());
      enc_outputs: float32 [B, L, D]; enc_mask: bool [B, L]; query: float32 [B, query_dim];
      past_lse: float32 [B, L], log sum_{j<t} exp(e_ji) (-inf-like NEG_LSE at t = 1).
    Returns: context [B, D], attn [B, L], new past_lse [B, L].

    Example:
      >>> att = IntraTemporalAttention(6); att.build((None, None, 4))
      >>> feats = att.precompute(tf.zeros([2, 5, 4]))
    """

    NEG_LSE = -1e4  # log of "no past step": exp(-1e4) = 0, and finite

    def __init__(self, query_dim: int, temporal: bool = True, **kwargs):
        # No autocast of the inputs under mixed precision: past_lse stays float32 (a running
        # log-sum-exp that float16 or bfloat16 would round); w_attn casts its own.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.query_dim = query_dim
        self.temporal = temporal
        self.w_attn = keras.layers.Dense(query_dim, use_bias=False, name="w_attn")

    def build(self, enc_shape):
        self.w_attn.build(enc_shape)
        self.built = True

    def precompute(self, enc_outputs):
        return self.w_attn(enc_outputs)

    def call(self, enc_features, enc_outputs, enc_mask, query, past_lse):
        scores = tf.einsum("bld,bd->bl", enc_features, query)  # (2)
        scores = tf.cast(scores, tf.float32)
        if self.temporal:
            # (3): dividing by sum_{j<t} exp(e_ji) is subtracting its log; none at t = 1.
            first = past_lse <= self.NEG_LSE / 2
            normed = tf.where(first, scores, scores - past_lse)
            new_lse = tf.where(first, scores, tf.math.reduce_logsumexp(
                tf.stack([past_lse, scores]), axis=0))
        else:
            normed, new_lse = scores, past_lse
        attn = masked_softmax(normed, enc_mask)  # (4)
        context = tf.einsum("bl,bld->bd", tf.cast(attn, enc_outputs.dtype), enc_outputs)  # (5)
        return context, attn, new_lse

    def get_config(self):
        config = super().get_config()
        config.update(query_dim=self.query_dim, temporal=self.temporal)
        return config
