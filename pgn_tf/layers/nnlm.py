"""The feed-forward NNLM decoder of Rush, Chopra & Weston (2015) section 3 (after Bengio et al.
2003), over a window of the last C summary words:

    p(y_{i+1} | y_c, x) ∝ exp(V h + W enc(x, y_c))                         (1)
    y~_c = [E y_{i-C+1}, ..., E y_i]
    h    = tanh(U y~_c)

(each matrix with its bias). The window has no recurrence, so teacher forcing runs every
position at once.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def context_windows(dec_input: tf.Tensor, window: int, pad_id: int) -> tf.Tensor:
    """For each position i, the C ids y_{i-C+1..i} (the input sequence already starts with
    [START]; earlier positions are pad_id, Rush et al. pad with <s>).

    dec_input: int32 [B, T] -> int32 [B, T, C]."""
    b = tf.shape(dec_input)[0]
    padded = tf.concat([tf.fill([b, window - 1], pad_id), dec_input], axis=1)  # [B, C-1+T]
    t = tf.shape(dec_input)[1]
    idx = tf.range(t)[:, None] + tf.range(window)[None, :]  # [T, C]
    return tf.gather(padded, idx, axis=1)


class NNLMDecoder(keras.layers.Layer):
    """Args: vocab_size V, emb_dim D, hidden_dim H, window C.

    Call args: context: int32 [..., C] window ids; enc: float [..., H] the encoder term.
    Returns logits float [..., V] = V h + W enc + b.

    Example:
      >>> dec = NNLMDecoder(50, 8, 16, 5); dec.build(None)
      >>> logits = dec(tf.zeros([2, 5], tf.int32), tf.zeros([2, 16]))
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, window: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.emb_dim = emb_dim
        self.hidden_dim = hidden_dim
        self.window = window
        self.embedding = keras.layers.Embedding(vocab_size, emb_dim, name="E")
        self.u = keras.layers.Dense(hidden_dim, activation="tanh", name="U")
        self.v = keras.layers.Dense(vocab_size, name="V")
        self.w = keras.layers.Dense(vocab_size, use_bias=False, name="W")  # V's bias suffices

    def build(self, input_shape=None):
        self.embedding.build((None,))
        self.u.build((None, self.window * self.emb_dim))
        self.v.build((None, self.hidden_dim))
        self.w.build((None, self.hidden_dim))
        self.built = True

    def hidden(self, context):
        """h = tanh(U y~_c): context int [..., C] -> [..., H]."""
        emb = self.embedding(context)  # [..., C, D]
        flat = tf.reshape(emb, tf.concat([tf.shape(context)[:-1], [self.window * self.emb_dim]], 0))
        return self.u(flat)

    def call(self, context, enc):
        return self.v(self.hidden(context)) + self.w(enc)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, emb_dim=self.emb_dim,
                      hidden_dim=self.hidden_dim, window=self.window)
        return config
