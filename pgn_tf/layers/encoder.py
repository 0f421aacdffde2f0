"""The See et al. (2017) encoder: a single-layer bidirectional LSTM plus the state reduction."""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.ops import resolve_rnn_impl
from pgn_tf.ops.lstm_recurrence import check_bidirectional, fused_bilstm


class BiLSTMEncoder(keras.layers.Layer):
    """Bidirectional LSTM over the article; its final forward/backward states are reduced to the
    decoder's initial state by ReLU layers (See et al.'s code, `_reduce_states`).

    The weights are those of a `keras.layers.Bidirectional(LSTM)`, and the recurrence runs one
    of two ways on them (the same variables, so a checkpoint written with one restores into the
    other), numerically the same LSTM (tests/layers/test_encoder.py):
      "fused": pgn_tf.ops.lstm_recurrence.fused_bilstm, both directions in one loop with the
        backward pass written out; XLA-compilable. It refuses LSTM options it does not
        implement (lstm_options, ops.check_lstm_options).
      "keras": the Keras layer itself (a masked while loop per direction; cuDNN on a GPU),
        every option honoured.

    Args:
      hidden_dim: the LSTM size of each direction.
      init_mag: uniform initializer magnitude (See et al.: 0.02).
      reduce_states: True (See et al.): h, c are ReLU-reduced to state_dim; False (Paulus et
        al.: h_0^d = h_n^e): h, c are the concatenated final states, 2 * hidden_dim.
      state_dim: the decoder's size the states are reduced to (default hidden_dim).
      rnn_impl: "fused", "keras" or "auto" (model.rnn_impl; ops.resolve_rnn_impl).
      lstm_options: further keyword arguments of each direction's `keras.layers.LSTM`
        (e.g. dropout), honoured by "keras" and refused by "fused" unless it implements them.

    Call args:
      emb: float [batch, src_len, emb_dim]; mask: bool [batch, src_len] (a prefix of each row);
      training: for the LSTM's own dropout, if lstm_options set one.
    Returns:
      outputs: float [batch, src_len, 2 * hidden_dim] (zeros at padding); h, c: float
      [batch, state_dim] (or [batch, 2 * hidden_dim] without reduce_states).

    Example:
      >>> enc = BiLSTMEncoder(4)
      >>> out, h, c = enc(tf.zeros([2, 3, 5]), tf.ones([2, 3], bool))
    """

    def __init__(self, hidden_dim: int, init_mag: float = 0.02, reduce_states: bool = True,
                 state_dim: int | None = None, rnn_impl: str = "auto",
                 lstm_options: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.init_mag = init_mag
        self.reduce_states = reduce_states
        self.state_dim = state_dim or hidden_dim
        self.rnn_impl = resolve_rnn_impl(rnn_impl)
        self.lstm_options = dict(lstm_options or {})
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=1)
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(
                hidden_dim,
                return_sequences=True,
                return_state=True,
                kernel_initializer=init,
                recurrent_initializer=init,
                **self.lstm_options,
            ),
            name="bilstm",
        )
        if self.rnn_impl == "fused":
            check_bidirectional(self.bilstm, f"encoder '{self.name}'")
        if reduce_states:
            self.reduce_c = keras.layers.Dense(self.state_dim, activation="relu", name="reduce_c")
            self.reduce_h = keras.layers.Dense(self.state_dim, activation="relu", name="reduce_h")

    def build(self, input_shape):
        self.bilstm.build(input_shape)
        if self.reduce_states:
            self.reduce_c.build((None, 2 * self.hidden_dim))
            self.reduce_h.build((None, 2 * self.hidden_dim))

    def call(self, emb, mask, training=None):
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)  # [B]
        if self.rnn_impl == "keras":
            # cuDNN refuses a row with no valid step (Keras asserts on it): an empty article
            # runs on its first (padding) step, and its outputs and states are zeroed below.
            empty = lengths == 0
            run_mask = mask | (empty[:, None] & (tf.range(tf.shape(mask)[1]) == 0)[None, :])
            outputs, fw_h, fw_c, bw_h, bw_c = self.bilstm(emb, mask=run_mask, training=training)
            h, c = (tf.concat(s, axis=-1) for s in ((fw_h, bw_h), (fw_c, bw_c)))  # [B, 2H]
            h, c = (tf.where(empty[:, None], tf.zeros_like(s), s) for s in (h, c))
        else:
            check_bidirectional(self.bilstm, f"encoder '{self.name}'")  # options set later
            outputs, h, c = fused_bilstm(self.bilstm, emb, lengths)
        outputs = outputs * tf.cast(mask, outputs.dtype)[:, :, None]
        if self.reduce_states:
            h, c = self.reduce_h(h), self.reduce_c(c)
        return outputs, h, c

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim, init_mag=self.init_mag,
                      reduce_states=self.reduce_states, state_dim=self.state_dim,
                      rnn_impl=self.rnn_impl, lstm_options=self.lstm_options)
        return config
