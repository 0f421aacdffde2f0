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
leaves to accumulate E wide instead of D (a quarter at See et al.'s D = 4E). Two gradients
that autodiff would add up inside the loop's backward pass, step by step, are summed once after
it instead, from the loop's outputs: the feed's encoder side (`FeedGradient`) and the LSTM's
weights (`GateGradient`). `call` is one whole step, for the search.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from pgn_tf.layers.attention import BahdanauAttention
from pgn_tf.layers.pointer import PointerSwitch


class _SummedAfterLoop:
    """Zero-valued probes [T, ...], added inside a teacher-forced loop, whose custom gradient
    turns their gradient (every step's, stacked) into the gradients of `inputs` by
    `sums(dprobes, *handed)`, from the loop outputs handed over by `close` after the loop (a
    gradient is only computed after the forward pass, so they exist by then)."""

    def __init__(self, shape, dtype, sums, *inputs):
        self._handed = None

        @tf.custom_gradient
        def probe(*inputs):
            def grad(dprobes):
                if self._handed is None:
                    raise RuntimeError(f"{type(self).__name__}.close(...) was not called "
                                       "after the loop")
                return sums(dprobes, *self._handed)
            return tf.zeros(shape, dtype), grad

        self.probes = probe(*inputs)

    def close(self, *handed):
        self._handed = handed


class FeedGradient(_SummedAfterLoop):
    """The gradient of the context feed's encoder side, summed once after the teacher-forced
    loop instead of at every step.

    Each step forms fed_t = sum_i a_i^t (W_x[E:] h_i) from enc_fed [B, L, E]. Autodiff of the
    loop adds the outer product a^t (x) d fed_t, a whole [B, L, E] tensor, into enc_fed's
    gradient at every step of the backward loop; the sum over steps is one batched matmul,
    sum_t a^t (x) d fed_t = A^T dF with A [B, T, L] the attention of all steps (a loop output)
    and dF [B, T, E] the gradients of all feeds. So the loop reads `enc_fed` with its gradient
    stopped (the attention's side, d a^t = d fed_t enc_fed^T, is unchanged) and adds `probes`
    [T, B, E], zeros whose gradient is dF: their custom gradient forms A^T dF from the
    attention handed over by `close` after the loop. The same numbers as autodiff of the plain
    loop (tests/layers/test_decoder.py), about 3% of a training step at the reference sizes
    (docs/performance.md).

    Example (inside a model's call):
      >>> feed = FeedGradient(enc_fed, steps)
      >>> # in the loop: cell.step(x_t, state, enc, feed.enc_fed, probe=probes.read(t))
      >>> feed.close(attn_seq)  # [B, T, L], after the loop
    """

    def __init__(self, enc_fed, steps):
        self.enc_fed = tf.stop_gradient(enc_fed)
        super().__init__(tf.stack([steps, tf.shape(enc_fed)[0], tf.shape(enc_fed)[2]]),
                         enc_fed.dtype, self._sums, enc_fed)

    @staticmethod
    def _sums(dprobes, attn):  # dprobes [T, B, E]
        return tf.matmul(tf.cast(attn, dprobes.dtype), tf.transpose(dprobes, [1, 0, 2]),
                         transpose_a=True)

    def close(self, attn):
        """attn: float [B, T, L], every step's attention (what the loop wrote)."""
        super().close(attn)


class GateGradient(_SummedAfterLoop):
    """The decoder LSTM's weight gradients summed once after the teacher-forced loop.

    Autodiff of the loop computes, at every step of its backward pass, x_t^T dz_t and
    h_{t-1}^T dz_t for the kernel K and the recurrent kernel R (each cast back to float32
    under mixed precision) and adds them into running sums. Here the loop runs the LSTM on
    K, R and b with their gradients stopped (`weights`, cast once) and adds `probes` [T, B, 4H]
    to its gate pre-activations z_t, zeros whose gradient is dZ, every step's dz_t; their
    custom gradient returns X^T dZ, H_prev^T dZ and the sum of dZ for K, R and b, one matmul
    each over all steps, from the inputs handed over by `close` after the loop (as
    FeedGradient). Gate blocks in `weights` are i, f, o, g (one sigmoid covers three). The
    same numbers as autodiff of the loop on the Keras cell (tests/layers/test_decoder.py),
    about 4% of a training step at the reference sizes (docs/performance.md).
    """

    def __init__(self, cell, steps, batch):
        def reorder(w):  # Keras's i, f, g, o -> i, f, o, g; split + concat differentiate cheaply
            i, f, g, o = tf.split(tf.cast(w, cell.compute_dtype), 4, axis=-1)
            return tf.concat([i, f, o, g], axis=-1)

        weights = {k: reorder(w) for k, w in (("kernel", cell.lstm.kernel),
                                              ("recurrent", cell.lstm.recurrent_kernel),
                                              ("bias", cell.lstm.bias))}
        self.weights = {k: tf.stop_gradient(w) for k, w in weights.items()}
        super().__init__(tf.stack([steps, batch, 4 * cell.hidden_dim]), cell.compute_dtype,
                         self._sums, weights["kernel"], weights["recurrent"], weights["bias"])

    @staticmethod
    def _sums(dz, x, h_prev):  # dz [T, B, 4H]
        dz2 = tf.reshape(dz, [-1, dz.shape[-1]])
        x, h_prev = (tf.reshape(tf.cast(t, dz.dtype), [-1, t.shape[-1]]) for t in (x, h_prev))
        return (tf.matmul(x, dz2, transpose_a=True), tf.matmul(h_prev, dz2, transpose_a=True),
                tf.cast(tf.reduce_sum(tf.cast(dz2, tf.float32), 0), dz.dtype))

    def close(self, x, h_prev):
        """x: float [T, B, E], every step's LSTM input; h_prev: [T, B, H], its h_{t-1}."""
        super().close(x, h_prev)


class AttentionDecoderCell(keras.layers.Layer):
    """Args: hidden_dim H (the decoder LSTM), emb_dim E, pointer_gen, coverage, init_mag,
    enc_dim D: the width of the encoder outputs and of the context h*_t (2 x the encoder's
    units per direction; default 2H, See et al.'s sizes). The attention's score space is D.

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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.emb_dim = emb_dim
        self.pointer_gen = pointer_gen
        self.coverage = coverage
        self.init_mag = init_mag
        self.enc_dim = enc_dim or 2 * hidden_dim
        init = keras.initializers.RandomUniform(-init_mag, init_mag, seed=2)
        self.input_proj = keras.layers.Dense(emb_dim, name="input_proj")
        self.lstm = keras.layers.LSTMCell(
            hidden_dim, kernel_initializer=init, recurrent_initializer=init, name="lstm"
        )
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

    def _lstm_with(self, x, state, weights, probe):
        """_lstm on a GateGradient's weights (gate blocks i, f, o, g), its probe added to z."""
        z = (tf.matmul(x, weights["kernel"]) + tf.matmul(state["h"], weights["recurrent"])
             + weights["bias"] + probe)
        sig, g = tf.split(z, [3 * self.hidden_dim, self.hidden_dim], axis=-1)
        i, f, o = tf.split(tf.sigmoid(sig), 3, axis=-1)
        c = f * state["c"] + i * tf.tanh(g)
        return self._with_query(h=o * tf.tanh(c), c=c, state=state)

    def _with_query(self, h, c, state):
        """h, c, the attention's query [c; h] (See et al.'s code) and the coverage (None
        without it)."""
        cov = state["coverage"] if self.coverage else None
        return h, c, tf.concat([c, h], -1), cov

    def step(self, x_part, state, enc, enc_fed, probe=None, gates=None):
        """The recurrence alone. x_part: float [B, E] = embed_inputs(emb(y_{t-1}));
        enc_fed: feed_inputs(enc["outputs"]) (or a FeedGradient's `enc_fed`, with `probe` its
        probe of this step); gates: None (the Keras LSTM cell) or (a GateGradient's
        `weights`, its probe of this step). state: dict(h, c [B, H], fed [B, E] = W_x[E:] h*_{t-1},
        coverage [B, L]) (the first fed: W_x[E:] of the initial context, zero).
        Returns the new state and dict(x [B, E], attn [B, L], coverage [B, L] = c^t); the
        context h*_t is `contexts(attn, enc["outputs"])`."""
        x = x_part + state["fed"]  # W_x [emb; h*_{t-1}] + b
        if gates is None:
            h, c, query, cov = self._lstm(x, state)
        else:
            h, c, query, cov = self._lstm_with(x, state, *gates)
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

    def call(self, x_emb, state, enc):
        x = self.input_proj(tf.concat([x_emb, state["context"]], -1))  # W_x [emb; h*_{t-1}] + b
        h, c, query, cov = self._lstm(x, state)
        context, attn = self.attention(enc["features"], enc["outputs"], enc["mask"], query, cov)
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
        )
        return config
