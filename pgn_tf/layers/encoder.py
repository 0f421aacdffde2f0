"""The See et al. (2017) encoder: a single-layer bidirectional LSTM plus the state reduction."""

from __future__ import annotations

import keras
import tensorflow as tf

IMPLEMENTATIONS = ("loop", "keras")


def _per_direction(x, kernels):
    """x float [D, B, K] times kernels (D x [K, N]), direction by direction -> [D, B, N]."""
    return tf.stack([tf.matmul(x_d, k) for x_d, k in zip(tf.unstack(x, len(kernels)), kernels)])


@tf.custom_gradient
def lstm_recurrence(xw, recurrent):
    """The LSTM recurrence over inputs projected beforehand, with its backward pass (BPTT)
    written out.

        z_t = xw_t + h_{t-1} R;  i, f, o = sigmoid(z_t[:3H]);  g = tanh(z_t[3H:])
        c_t = f c_{t-1} + i g;   h_t = o tanh(c_t);            h_0 = c_0 = 0

    Autodiff of the while loop computes R's gradient inside the backward loop, a small
    [H, B] x [B, 4H] matmul and an add into the running sum every step; here the backward loop
    only carries dh, dc and writes dz_t, and R's gradient is one matmul after it,
    sum_t h_{t-1}^T dz_t over all steps at once (the same sum; tests/layers/test_encoder.py
    checks it against autodiff of the Keras layer and of the plain loop). About 2% of a
    training step at the reference sizes (docs/performance.md).

    Each step multiplies the D directions' states by their recurrent kernels one direction at a
    time (`_per_direction`), not as one [D, B, H] x [D, H, 4H] batched matmul: at small batches
    oneDNN's batched matmul costs several plain matmuls' time (per direction about 3.7x at B = 1,
    1.8x at B = 32 and H = 128, the same from B = 16 at H = 256): at one article and H = 256
    the forward loop over 100 steps took 21.4 ms that way against 8.5 ms now (README
    "Performance").

    Args:
      xw: float [L, D, B, 4H], the input projections plus bias of D independent LSTMs (here
        the two directions), gate blocks i, f, o, g; recurrent: float [D, H, 4H].
    Returns:
      hs, cs: float [L, D, B, H], h_t and c_t of every step.
    """
    steps = tf.shape(xw)[0]
    units = recurrent.shape[1]
    dtype = xw.dtype
    zeros = tf.zeros(tf.concat([tf.shape(xw)[1:3], [units]], 0), dtype)  # [D, B, H]
    inputs = tf.TensorArray(dtype, size=steps).unstack(xw)
    kernels = tf.unstack(recurrent)  # D x [H, 4H]

    def forward(t, h, c, hs, cs, sigs, gs):
        z = inputs.read(t) + _per_direction(h, kernels)  # [D, B, 4H]
        sig, g = tf.split(z, [3 * units, units], axis=-1)
        sig, g = tf.sigmoid(sig), tf.tanh(g)
        i, f, o = tf.split(sig, 3, axis=-1)
        c = f * c + i * g
        h = o * tf.tanh(c)
        return t + 1, h, c, hs.write(t, h), cs.write(t, c), sigs.write(t, sig), gs.write(t, g)

    arrays = tuple(tf.TensorArray(dtype, size=steps) for _ in range(4))
    _, _, _, hs, cs, sigs, gs = tf.while_loop(
        lambda t, *_: t < steps, forward, (tf.constant(0), zeros, zeros, *arrays),
        maximum_iterations=steps)
    hs, cs = hs.stack(), cs.stack()

    def grad(dhs, dcs):
        dhs = tf.zeros_like(hs) if dhs is None else dhs
        dcs = tf.zeros_like(cs) if dcs is None else dcs
        c_prev = tf.concat([zeros[None], cs], 0)[:steps]  # [L, D, B, H]: c_{t-1}
        reads = [tf.TensorArray(dtype, size=steps).unstack(x) for x in (dhs, dcs, cs, c_prev)]
        kernels_t = tf.unstack(tf.transpose(recurrent, [0, 2, 1]))  # D x [4H, H]

        def backward(t, dh, dc, dzs):
            t = t - 1
            dh_t, dc_t, c, c_prev = (r.read(t) for r in reads)
            sig, g = sigs.read(t), gs.read(t)
            i, f, o = tf.split(sig, 3, axis=-1)
            dh = dh + dh_t
            tanh_c = tf.tanh(c)
            dc = dc + dc_t + tf.raw_ops.TanhGrad(y=tanh_c, dy=dh * o)
            dsig = tf.raw_ops.SigmoidGrad(y=sig, dy=tf.concat([dc * g, dc * c_prev, dh * tanh_c],
                                                               axis=-1))
            dz = tf.concat([dsig, tf.raw_ops.TanhGrad(y=g, dy=dc * i)], axis=-1)  # [D, B, 4H]
            return t, _per_direction(dz, kernels_t), dc * f, dzs.write(t, dz)

        _, _, _, dzs = tf.while_loop(
            lambda t, *_: t > 0, backward,
            (steps, zeros, zeros, tf.TensorArray(dtype, size=steps)), maximum_iterations=steps)
        dxw = dzs.stack()  # [L, D, B, 4H]
        h_prev = tf.concat([zeros[None], hs], 0)[:steps]  # [L, D, B, H]: h_{t-1}
        d = tf.shape(xw)[1]
        drecurrent = tf.matmul(
            tf.reshape(tf.transpose(h_prev, [1, 0, 2, 3]), [d, -1, units]),
            tf.reshape(tf.transpose(dxw, [1, 0, 2, 3]), [d, -1, 4 * units]),
            transpose_a=True)  # [D, H, 4H]
        return dxw, drecurrent

    return (hs, cs), grad


class BiLSTMEncoder(keras.layers.Layer):
    """Bidirectional LSTM over the article; its final forward/backward states are reduced to the
    decoder's initial state by ReLU layers (See et al.'s code, `_reduce_states`).

    The weights are those of a `keras.layers.Bidirectional(LSTM)` (so checkpoints keep their
    variable names and shapes), and the recurrence runs one of two ways, numerically the same
    LSTM (tests/layers/test_encoder.py):
      "loop" (fused): both directions in one `tf.while_loop` over [2, B, H] states, the input
        projections of both computed before it in one batched matmul, the backward direction
        fed its article reversed by length (`tf.reverse_sequence`), so no step masks anything;
        XLA-compilable. Steps past an article's length run on padding: their outputs are
        zeroed and the final states are read at step length - 1 (zero for an empty article,
        as the masked Keras layer gives).
      "keras": the Keras layer itself (a masked while loop per direction; cuDNN on a GPU).

    Args:
      hidden_dim: the LSTM size of each direction.
      init_mag: uniform initializer magnitude (See et al.: 0.02).
      reduce_states: True (See et al.): h, c are ReLU-reduced to state_dim; False (Paulus et
        al.: h_0^d = h_n^e): h, c are the concatenated final states, 2 * hidden_dim.
      state_dim: the decoder's size the states are reduced to (default hidden_dim).
      implementation: "loop" or "keras" (above).

    Call args:
      emb: float [batch, src_len, emb_dim]; mask: bool [batch, src_len] (a prefix of each row).
    Returns:
      outputs: float [batch, src_len, 2 * hidden_dim] (zeros at padding); h, c: float
      [batch, state_dim] (or [batch, 2 * hidden_dim] without reduce_states).

    Example:
      >>> enc = BiLSTMEncoder(4)
      >>> out, h, c = enc(tf.zeros([2, 3, 5]), tf.ones([2, 3], bool))
    """

    def __init__(self, hidden_dim: int, init_mag: float = 0.02, reduce_states: bool = True,
                 state_dim: int | None = None, implementation: str = "loop", **kwargs):
        super().__init__(**kwargs)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"unknown encoder implementation '{implementation}' "
                             f"({', '.join(IMPLEMENTATIONS)})")
        self.hidden_dim = hidden_dim
        self.init_mag = init_mag
        self.reduce_states = reduce_states
        self.state_dim = state_dim or hidden_dim
        self.implementation = implementation
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
            self.reduce_c = keras.layers.Dense(self.state_dim, activation="relu", name="reduce_c")
            self.reduce_h = keras.layers.Dense(self.state_dim, activation="relu", name="reduce_h")

    def build(self, input_shape):
        self.bilstm.build(input_shape)
        if self.reduce_states:
            self.reduce_c.build((None, 2 * self.hidden_dim))
            self.reduce_h.build((None, 2 * self.hidden_dim))

    def call(self, emb, mask):
        if self.implementation == "keras":
            outputs, fw_h, fw_c, bw_h, bw_c = self.bilstm(emb, mask=mask)
            h = tf.concat([fw_h, bw_h], axis=-1)
            c = tf.concat([fw_c, bw_c], axis=-1)
        else:
            outputs, h, c = self._loop(emb, tf.reduce_sum(tf.cast(mask, tf.int32), axis=1))
        outputs = outputs * tf.cast(mask, outputs.dtype)[:, :, None]
        if self.reduce_states:
            h, c = self.reduce_h(h), self.reduce_c(c)
        return outputs, h, c

    # -- the fused recurrence ----------------------------------------------------------------

    def _weights(self, dtype):
        """(kernel [2, E, 4H], recurrent kernel [2, H, 4H], bias [2, 4H]): forward, backward;
        gate blocks reordered from Keras's i, f, g, o to i, f, o, g, so that one sigmoid covers
        the three gates and one tanh the candidate (fewer kernels a step)."""
        cells = (self.bilstm.forward_layer.cell, self.bilstm.backward_layer.cell)

        def stack(name):
            w = tf.stack([tf.cast(getattr(c, name), dtype) for c in cells])
            # split + concat, not slices: their gradients are a concat and a split, where
            # three slices' gradients are three StridedSliceGrads, each writing the whole
            # weight, and their sum (2 ms a step at the reference sizes)
            i, f, g, o = tf.split(w, 4, axis=-1)
            return tf.concat([i, f, o, g], axis=-1)

        return stack("kernel"), stack("recurrent_kernel"), stack("bias")

    @staticmethod
    def _sequence(seq, lengths):
        """seq: [L, 2, B, H] per-step h, time-major (forward; backward in reversed time)
        -> [B, L, 2H] batch-major, both directions in article order. One transpose, then an
        unstack of the leading axis: slicing seq[:, d] instead differentiates into a
        StridedSliceGrad per direction, each writing a whole [L, 2, B, H] tensor (about 3% of
        a training step at the reference sizes, docs/performance.md)."""
        fw, bw = tf.unstack(tf.transpose(seq, [1, 2, 0, 3]))  # [B, L, H] each
        bw = tf.reverse_sequence(bw, lengths, seq_axis=1, batch_axis=0)
        return tf.concat([fw, bw], axis=-1)

    @staticmethod
    def _final(seq, lengths):
        """seq: [L, 2, B, H] -> the values at step length - 1 of both directions, [B, 2H]
        (zero for an empty article, as the masked Keras layer gives)."""
        b = tf.shape(lengths)[0]
        last = tf.broadcast_to(tf.maximum(lengths - 1, 0)[:, None], [b, 2])
        direction = tf.broadcast_to(tf.range(2)[None, :], [b, 2])
        example = tf.broadcast_to(tf.range(b)[:, None], [b, 2])
        final = tf.gather_nd(seq, tf.stack([last, direction, example], axis=-1))  # [B, 2, H]
        final = tf.reshape(final, [b, 2 * seq.shape[-1]])
        return tf.where((lengths > 0)[:, None], final, tf.zeros_like(final))

    def _loop(self, emb, lengths):
        kernel, recurrent, bias = self._weights(emb.dtype)
        x = tf.transpose(emb, [1, 0, 2])  # [L, B, E]
        steps, b, e = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[2]
        x = tf.stack([x, tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)])
        # Both directions' input projections before the loop, in one (batched) matmul:
        # [2, L*B, E] x [2, E, 4H].
        xw = tf.matmul(tf.reshape(x, [2, -1, e]), kernel) + bias[:, None, :]
        xw = tf.transpose(tf.reshape(xw, [2, steps, b, -1]), [1, 0, 2, 3])  # [L, 2, B, 4H]
        hs, cs = lstm_recurrence(xw, recurrent)  # [L, 2, B, H] each
        return self._sequence(hs, lengths), self._final(hs, lengths), self._final(cs, lengths)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim, init_mag=self.init_mag,
                      reduce_states=self.reduce_states, state_dim=self.state_dim,
                      implementation=self.implementation)
        return config
