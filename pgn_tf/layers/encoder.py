"""The See et al. (2017) encoder: a single-layer bidirectional LSTM plus the state reduction."""

from __future__ import annotations

import keras
import tensorflow as tf


class BiLSTMEncoder(keras.layers.Layer):
    """Bidirectional LSTM over the article; its final forward/backward states are reduced to the
    decoder's initial state by ReLU layers (See et al.'s code, `_reduce_states`).

    Args:
      hidden_dim: H, the LSTM size of each direction and of the decoder.
      init_mag: uniform initializer magnitude (See et al.: 0.02).
      reduce_states: True (See et al.): h, c are ReLU-reduced to H; False (Paulus et al.:
        h_0^d = h_n^e): h, c are the concatenated final states, 2H.

    Call args:
      emb: float32 [batch, src_len, emb_dim]; mask: bool [batch, src_len].
    Returns:
      outputs: float32 [batch, src_len, 2H] (zeros at padding); h, c: float32 [batch, H]
      (or [batch, 2H] without reduce_states).

    Example:
      >>> enc = BiLSTMEncoder(4)
      >>> out, h, c = enc(tf.zeros([2, 3, 5]), tf.ones([2, 3], bool))
    """

    def __init__(self, hidden_dim: int, init_mag: float = 0.02, reduce_states: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.init_mag = init_mag
        self.reduce_states = reduce_states
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=1)
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(
                hidden_dim,
                return_sequences=True,
                return_state=True,
                kernel_initializer=init,
                recurrent_initializer=init,
            ),
            name="bilstm",
        )
        if reduce_states:
            self.reduce_c = keras.layers.Dense(hidden_dim, activation="relu", name="reduce_c")
            self.reduce_h = keras.layers.Dense(hidden_dim, activation="relu", name="reduce_h")

    def build(self, input_shape):
        self.bilstm.build(input_shape)
        if self.reduce_states:
            self.reduce_c.build((None, 2 * self.hidden_dim))
            self.reduce_h.build((None, 2 * self.hidden_dim))

    def call(self, emb, mask):
        outputs, fw_h, fw_c, bw_h, bw_c = self.bilstm(emb, mask=mask)
        outputs = outputs * tf.cast(mask, outputs.dtype)[:, :, None]
        h = tf.concat([fw_h, bw_h], axis=-1)
        c = tf.concat([fw_c, bw_c], axis=-1)
        if self.reduce_states:
            h, c = self.reduce_h(h), self.reduce_c(c)
        return outputs, h, c

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim, init_mag=self.init_mag,
                      reduce_states=self.reduce_states)
        return config
