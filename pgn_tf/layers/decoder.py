"""One step of See et al.'s attention decoder (their `attention_decoder`), as a Keras layer.

Per step t, with previous context h*_{t-1} fed back in (input feeding, See et al.'s code):
    x_t      = W_x [emb(y_{t-1}); h*_{t-1}] + b                 decoder input
    s_t      = LSTM(x_t, s_{t-1})
    h*_t, a^t = attention(h, s_t = [c_t; h_t], c^t)               eq. 1-3 / 11
    o_t      = W_o [h_t; h*_t] + b                               first linear layer of eq. 4
    p_gen    = sigmoid(w [h*_t; c_t; h_t; x_t] + b_ptr)          eq. 8
    c^{t+1}  = c^t + a^t                                         eq. 10
The vocabulary layer (second linear of eq. 4) is applied by the model, to all steps at once.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import BahdanauAttention
from pgn_tf.layers.pointer import PointerSwitch


class AttentionDecoderCell(keras.layers.Layer):
    """Args: hidden_dim H, emb_dim E, pointer_gen, coverage, init_mag.

    State (a dict, reordered as one unit by the beam search):
      h, c: float32 [batch, H]; context: float32 [batch, 2H]; coverage: float32 [batch, src_len].
    Call args:
      x_emb: float32 [batch, E]; state; enc: dict(features [B, L, 2H], outputs [B, L, 2H],
      mask bool [B, L]).
    Returns:
      output o_t float32 [batch, H]; new state; extras dict(attn [B, L], p_gen_logit [B],
      coverage [B, L] = c^t used at this step).

    Example:
      >>> cell = AttentionDecoderCell(4, 3, pointer_gen=True, coverage=True)
    """

    def __init__(
        self,
        hidden_dim: int,
        emb_dim: int,
        pointer_gen: bool = True,
        coverage: bool = False,
        init_mag: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.coverage = coverage
        self.init_mag = init_mag
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=2)
        self.input_proj = keras.layers.Dense(emb_dim, name="input_proj")
        self.lstm = keras.layers.LSTMCell(
            hidden_dim, kernel_initializer=init, recurrent_initializer=init, name="lstm"
        )
        self.attention = BahdanauAttention(2 * hidden_dim, use_coverage=coverage, name="attention")
        self.output_proj = keras.layers.Dense(hidden_dim, name="output_proj")
        self.switch = PointerSwitch(name="pointer") if pointer_gen else None

    def build(self, input_shape=None):
        h, e = self.hidden_dim, self.emb_dim
        self.input_proj.build((None, e + 2 * h))
        self.lstm.build((None, e))
        self.attention.build((None, None, 2 * h), 2 * h)
        self.output_proj.build((None, 3 * h))
        if self.switch is not None:
            self.switch.build(2 * h + h + h + e)
        self.built = True

    def call(self, x_emb, state, enc):
        x = self.input_proj(tf.concat([x_emb, state["context"]], axis=-1))
        h, (h, c) = self.lstm(x, [state["h"], state["c"]])
        cov = state["coverage"] if self.coverage else None
        context, attn = self.attention(
            enc["features"], enc["outputs"], enc["mask"], tf.concat([c, h], -1), cov
        )
        output = self.output_proj(tf.concat([h, context], axis=-1))
        if self.switch is not None:
            p_gen_logit = self.switch([context, c, h, x])[:, 0]
        else:
            p_gen_logit = tf.fill(tf.shape(h)[:1], tf.constant(30.0, h.dtype))  # p_gen = 1
        new_state = {
            "h": h,
            "c": c,
            "context": context,
            "coverage": state["coverage"] + attn,
        }
        extras = {"attn": attn, "p_gen_logit": p_gen_logit, "coverage": state["coverage"]}
        return output, new_state, extras

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_dim=self.hidden_dim,
            emb_dim=self.emb_dim,
            pointer_gen=self.pointer_gen,
            coverage=self.coverage,
            init_mag=self.init_mag,
        )
        return config
