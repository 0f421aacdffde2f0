"""The decoder's teacher-forced loop with two of its gradients summed once after the loop
(model.rnn_impl = "fused"), instead of step by step inside autodiff's backward loop: the
context feed's encoder side (`FeedGradient`) and the decoder LSTM's weights (`GateGradient`).

Autodiff of a `tf.while_loop` adds each loop-invariant input's gradient into a running sum at
every step of the backward loop; the sum over steps is one matmul over the loop's outputs.
Each class makes zero-valued probes [T, ...] that the loop adds to one of its tensors; the
probes' custom gradient receives every step's gradient of that tensor, stacked, and turns it
into the gradients of the loop-invariant inputs, from loop outputs handed over by `close`
after the loop. The same numbers as autodiff of the plain loop
(tests/ops/test_summed_after_loop.py; the assembled model: tests/models/
test_model_gradients.py). Their share of a training step: docs/performance.md.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.ops import check_lstm_options


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
    attention handed over by `close` after the loop.

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
    """A Keras LSTMCell's weight gradients summed once after the teacher-forced loop.

    Autodiff of the loop computes, at every step of its backward pass, x_t^T dz_t and
    h_{t-1}^T dz_t for the kernel K and the recurrent kernel R (each cast back to float32
    under mixed precision) and adds them into running sums. Here the loop runs the LSTM
    (`lstm`) on K, R and b with their gradients stopped (`weights`, cast once) and adds
    `probes` [T, B, 4H] to its gate pre-activations z_t, zeros whose gradient is dZ, every
    step's dz_t; their custom gradient returns X^T dZ, H_prev^T dZ and the sum of dZ for K, R
    and b, one matmul each over all steps, from the inputs handed over by `close` after the
    loop (as FeedGradient). Gate blocks in `weights` are i, f, o, g (one sigmoid covers three).

    Args:
      cell: the keras.layers.LSTMCell whose weights these are (its options are checked:
        ops.check_lstm_options); steps, batch: int scalars T and B; dtype: the compute dtype.
    """

    def __init__(self, cell, steps, batch, dtype):
        check_lstm_options(cell, f"decoder LSTM cell '{cell.name}'")
        self.units = cell.units

        def reorder(w):  # Keras's i, f, g, o -> i, f, o, g; split + concat differentiate cheaply
            i, f, g, o = tf.split(tf.cast(w, dtype), 4, axis=-1)
            return tf.concat([i, f, o, g], axis=-1)

        weights = {k: reorder(w) for k, w in (("kernel", cell.kernel),
                                              ("recurrent", cell.recurrent_kernel),
                                              ("bias", cell.bias))}
        self.weights = {k: tf.stop_gradient(w) for k, w in weights.items()}
        super().__init__(tf.stack([steps, batch, 4 * cell.units]), dtype, self._sums,
                         weights["kernel"], weights["recurrent"], weights["bias"])

    def lstm(self, x, h, c, probe):
        """One LSTM step on `weights`, this step's probe added to z: x float [B, E], h, c
        [B, H], probe [B, 4H] -> (h_t, c_t)."""
        w = self.weights
        z = tf.matmul(x, w["kernel"]) + tf.matmul(h, w["recurrent"]) + w["bias"] + probe
        sig, g = tf.split(z, [3 * self.units, self.units], axis=-1)
        i, f, o = tf.split(tf.sigmoid(sig), 3, axis=-1)
        c = f * c + i * tf.tanh(g)
        return o * tf.tanh(c), c

    @staticmethod
    def _sums(dz, x, h_prev):  # dz [T, B, 4H]
        dz2 = tf.reshape(dz, [-1, dz.shape[-1]])
        x, h_prev = (tf.reshape(tf.cast(t, dz.dtype), [-1, t.shape[-1]]) for t in (x, h_prev))
        return (tf.matmul(x, dz2, transpose_a=True), tf.matmul(h_prev, dz2, transpose_a=True),
                tf.cast(tf.reduce_sum(tf.cast(dz2, tf.float32), 0), dz.dtype))

    def close(self, x, h_prev):
        """x: float [T, B, E], every step's LSTM input; h_prev: [T, B, H], its h_{t-1}."""
        super().close(x, h_prev)
