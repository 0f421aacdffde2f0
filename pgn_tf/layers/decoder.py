"""One step of See et al.'s attention decoder (their `attention_decoder`), as a Keras layer.

Per step t, with previous context h*_{t-1} fed back in (input feeding, See et al.'s code):
    x_t      = W_x [emb(y_{t-1}); h*_{t-1}] + b                 decoder input
    s_t      = LSTM(x_t, s_{t-1})
    h*_t, a^t = attention(h, s_t = [c_t; h_t], c^t)               eq. 1-3 / 11
    o_t      = W_o [h_t; h*_t] + b                               first linear layer of eq. 4
    p_gen    = sigmoid(w [h*_t; c_t; h_t; x_t] + b_ptr)          eq. 8
    c^{t+1}  = c^t + a^t                                         eq. 10
The vocabulary layer (second linear of eq. 4) is applied by the model, to all steps at once.

Teacher forcing runs only what feeds the recurrence inside the loop (`step`): the embedding
half of x_t, W_x[:E] emb(y_{t-1}) + b, is computed for all steps before it (`embed_inputs`),
and o_t and p_gen after it, over all steps at once (`outputs`). The context half enters the
recurrence as W_x[E:] h*_{t-1} = sum_i a_i^{t-1} (W_x[E:] h_i): the encoder states are
projected to E once per article (`feed_inputs`), the loop carries that E-wide vector, and the
contexts h*_t themselves (eq. 3, D wide) are formed after the loop for all steps in one batched
matmul (`contexts`): the same numbers, with the per-step weighted sum and the gradient it
leaves to accumulate E wide instead of D (a quarter at See et al.'s D = 4E). With
model.rnn_impl = "fused" two gradients that autodiff would add up inside the loop's backward
pass, step by step, are summed once after it instead (pgn_tf.ops.summed_after_loop: the
feed's encoder side, `FeedGradient`, and the LSTM's weights, `GateGradient`); with "keras" the
loop runs the Keras LSTMCell and autodiff differentiates it. `call` is one whole step, for the
search.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import BahdanauAttention
from pgn_tf.layers.pointer import PointerSwitch
from pgn_tf.ops import check_lstm_options, resolve_rnn_impl
from pgn_tf.ops.summed_after_loop import FeedGradient, GateGradient


class AttentionDecoderCell(keras.layers.Layer):
    """Args: hidden_dim H (the decoder LSTM), emb_dim E, pointer_gen, coverage, init_mag,
    enc_dim D: the width of the encoder outputs and of the context h*_t (2 x the encoder's
    units per direction; default 2H, See et al.'s sizes). The attention's score space is D.
    rnn_impl: "fused", "keras" or "auto" (model.rnn_impl; ops.resolve_rnn_impl): how a
    teacher-forced loop over `step` is differentiated (`loop_gradients`); "fused" refuses LSTM
    options it does not implement. lstm_options: further keyword arguments of the
    `keras.layers.LSTMCell` (e.g. dropout), honoured by "keras".

    State (a dict, reordered as one unit by the beam search):
      h, c: float32 [batch, H]; context: float32 [batch, D]; coverage: float32 [batch, src_len].
    Call args:
      x_emb: float32 [batch, E]; state; enc: dict(features [B, L, D], outputs [B, L, D],
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
        enc_dim: int | None = None,
        rnn_impl: str = "auto",
        lstm_options: dict | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.coverage = coverage
        self.init_mag = init_mag
        self.enc_dim = enc_dim or 2 * hidden_dim
        self.rnn_impl = resolve_rnn_impl(rnn_impl)
        self.lstm_options = dict(lstm_options or {})
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=2)
        self.input_proj = keras.layers.Dense(emb_dim, name="input_proj")
        self.lstm = keras.layers.LSTMCell(
            hidden_dim, kernel_initializer=init, recurrent_initializer=init, name="lstm",
            **self.lstm_options,
        )
        if self.rnn_impl == "fused":
            check_lstm_options(self.lstm, f"decoder '{self.name}'")
        self.attention = BahdanauAttention(self.enc_dim, use_coverage=coverage, name="attention")
        self.output_proj = keras.layers.Dense(hidden_dim, name="output_proj")
        self.switch = PointerSwitch(name="pointer") if pointer_gen else None

    def build(self, input_shape=None):
        h, e, d = self.hidden_dim, self.emb_dim, self.enc_dim
        self.input_proj.build((None, e + d))
        self.lstm.build((None, e))
        self.attention.build((None, None, d), 2 * h)
        self.output_proj.build((None, h + d))
        if self.switch is not None:
            self.switch.build(d + h + h + e)
        self.built = True

    def embed_inputs(self, x_emb):
        """The embedding half of x_t: W_x[:E] emb + b, float [..., E] for emb [..., E]."""
        kernel = tf.cast(self.input_proj.kernel, self.compute_dtype)[: self.emb_dim]
        bias = tf.cast(self.input_proj.bias, self.compute_dtype)
        return tf.tensordot(x_emb, kernel, 1) + bias

    def loop_gradients(self, enc_fed, steps, batch):
        """For a teacher-forced loop over `step`: with rnn_impl "fused", (FeedGradient on
        enc_fed [B, L, E], GateGradient on the LSTM) for T = steps and B = batch, whose
        gradients are summed after the loop (pgn_tf.ops.summed_after_loop); with "keras",
        None (autodiff differentiates the loop on the Keras cell)."""
        if self.rnn_impl != "fused":
            return None
        return (FeedGradient(enc_fed, steps),
                GateGradient(self.lstm, steps, batch, self.compute_dtype))

    def feed_inputs(self, enc_outputs):
        """W_x[E:] h_i for every encoder state, float [B, L, E] (once per article): the context
        half of x_{t+1} is then sum_i a_i^t of these (module docstring)."""
        return tf.tensordot(enc_outputs, self.context_kernel(), 1)

    def context_kernel(self):
        """The context half of W_x, float [D, E]."""
        return tf.cast(self.input_proj.kernel, self.compute_dtype)[self.emb_dim:]

    def _lstm(self, x, state):
        """s_t = LSTM(x_t, s_{t-1}) -> h, c [B, H] and the attention's query s_t = [c; h] (See
        et al.'s code) and coverage (None without it)."""
        _, (h, c) = self.lstm(x, [state["h"], state["c"]])
        return self._with_query(h, c, state)

    def _with_query(self, h, c, state):
        """h, c, the attention's query [c; h] (See et al.'s code) and the coverage (None
        without it)."""
        cov = state["coverage"] if self.coverage else None
        return h, c, tf.concat([c, h], -1), cov

    def step(self, x_part, state, enc, enc_fed, probe=None, gates=None):
        """The recurrence alone. x_part: float [B, E] = embed_inputs(emb(y_{t-1}));
        enc_fed: feed_inputs(enc["outputs"]) (or a FeedGradient's `enc_fed`, with `probe` its
        probe of this step); gates: None (the Keras LSTM cell) or (a GateGradient on this
        cell's `lstm`, its probe of this step) (pgn_tf.ops.summed_after_loop).
        state: dict(h, c [B, H], fed [B, E] = W_x[E:] h*_{t-1},
        coverage [B, L]) (the first fed: W_x[E:] of the initial context, zero).
        Returns the new state and dict(x [B, E], attn [B, L], coverage [B, L] = c^t); the
        context h*_t is `contexts(attn, enc["outputs"])`."""
        x = x_part + state["fed"]  # W_x [emb; h*_{t-1}] + b
        if gates is None:
            h, c, query, cov = self._lstm(x, state)
        else:
            gate_gradient, gate_probe = gates
            h, c = gate_gradient.lstm(x, state["h"], state["c"], gate_probe)
            h, c, query, cov = self._with_query(h, c, state)
        attn = self.attention.alignment(enc["features"], enc["mask"], query, cov)
        fed = tf.einsum("bl,ble->be", attn, enc_fed)
        if probe is not None:
            fed = fed + probe
        new_state = {"h": h, "c": c, "fed": fed, "coverage": state["coverage"] + attn}
        return new_state, {"x": x, "attn": attn, "coverage": state["coverage"]}

    @staticmethod
    def contexts(attn, enc_outputs):
        """h*_t (eq. 3) of every step at once: attn float [B, T, L], enc_outputs [B, L, D] ->
        [B, T, D]."""
        return tf.matmul(attn, enc_outputs)

    def outputs(self, h, c, context, x):
        """o_t float [..., H] and the p_gen logit [...] (eq. 4's first layer, eq. 8) from one
        step's (or all steps') h, c [..., H], context [..., D] and x [..., E]."""
        output = self.output_proj(tf.concat([h, context], axis=-1))
        if self.switch is not None:
            p_gen_logit = self.switch([context, c, h, x])[..., 0]
        else:
            p_gen_logit = tf.fill(tf.shape(h)[:-1], tf.constant(30.0, h.dtype))  # p_gen = 1
        return output, p_gen_logit

    def call(self, x_emb, state, enc, per_article: bool = False):
        """One step. enc: the encoder's outputs as `PointerGenerator.encode` gives them, a row a
        row of x_emb; per_article: enc's "features" and "outputs" hold each article once
        ([b, L, ...]) for its K consecutive rows (a beam search's hypotheses), broadcast in the
        attention."""
        x = self.input_proj(tf.concat([x_emb, state["context"]], -1))  # W_x [emb; h*_{t-1}] + b
        h, c, query, cov = self._lstm(x, state)
        context, attn = self.attention(enc["features"], enc["outputs"], enc["mask"], query, cov,
                                       beams=per_article)
        output, p_gen_logit = self.outputs(h, c, context, x)
        new_state = {"h": h, "c": c, "context": context, "coverage": state["coverage"] + attn}
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
            enc_dim=self.enc_dim,
            rnn_impl=self.rnn_impl,
            lstm_options=self.lstm_options,
        )
        return config
