"""Intra-decoder attention, Paulus et al. (2017) section 2.2:

    e_tt'^d = h_t^d^T W_attn^d h_t'^d                                      (6)
    a_tt'^d = exp(e_tt'^d) / sum_{j<t} exp(e_tj^d)                          (7)
    c_t^d   = sum_{t'<t} a_tt'^d h_t'^d,        c_1^d = 0                   (8)
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import masked_softmax


class IntraDecoderAttention(keras.layers.Layer):
    """Attention of the current decoder state over the previous ones.

    The previous states live in a fixed-size history [B, T_max, H] in the decoder state (so the
    beam search reorders it with everything else); `step` says how many are valid.

    Args:
      hidden_dim: H, the decoder state size.
    Call args:
      query: float32 [B, H] (h_t^d); history: float32 [B, T_max, H]; step: int32 scalar t - 1
      (the number of earlier states).
    Returns: context c_t^d float32 [B, H] (zero at the first step), attn [B, T_max].

    Example:
      >>> att = IntraDecoderAttention(4); att.build(None)
      >>> c, a = att(tf.ones([2, 4]), tf.zeros([2, 10, 4]), tf.constant(0))
    """

    def __init__(self, hidden_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.w_attn = keras.layers.Dense(hidden_dim, use_bias=False, name="w_attn")

    def build(self, input_shape=None):
        self.w_attn.build((None, self.hidden_dim))
        self.built = True

    def call(self, query, history, step):
        scores = tf.einsum("bth,bh->bt", history, self.w_attn(query))  # (6)
        valid = tf.range(tf.shape(history)[1])[None, :] < step  # t' < t
        valid = tf.broadcast_to(valid, tf.shape(scores))
        attn = masked_softmax(tf.cast(scores, tf.float32), valid)  # (7); all zero when t = 1
        context = tf.einsum("bt,bth->bh", tf.cast(attn, history.dtype), history)  # (8)
        return context, attn

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim)
        return config
