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

    scores: float [..., n]; mask: bool [..., n].
    """
    scores = tf.where(mask, scores, tf.constant(-1e9, scores.dtype))
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

    def call(self, enc_features, enc_outputs, enc_mask, query, coverage=None):
        feats = enc_features + self.w_s(query)[:, None, :]  # [B, L, A]
        if self.use_coverage and coverage is not None:
            feats = feats + coverage[:, :, None] * self.w_c
        scores = tf.reduce_sum(self.v * tf.tanh(feats), axis=-1)  # [B, L]
        attn = masked_softmax(scores, enc_mask)
        context = tf.einsum("bl,bld->bd", attn, enc_outputs)
        return context, attn

    def get_config(self):
        config = super().get_config()
        config.update(attn_dim=self.attn_dim, use_coverage=self.use_coverage)
        return config
