"""The fused bidirectional LSTM of the encoder (model.rnn_impl = "fused"): both directions in
one `tf.while_loop` with the backward pass (BPTT) written out.

The weights are those of a `keras.layers.Bidirectional(LSTM)` (BiLSTMEncoder's "keras" path),
read as they are, so checkpoints are the same either way.
"""

from __future__ import annotations

import contextlib
import threading

import keras
import tensorflow as tf

from pgn_tf.ops import check_lstm_options


def _per_direction(x, kernels):
    """x float [D, B, K] times kernels (D x [K, N]), direction by direction -> [D, B, N]."""
    return tf.stack([tf.matmul(x_d, k) for x_d, k in zip(tf.unstack(x, len(kernels)), kernels)])


def _forward_loop(step_input, steps, zeros, recurrent, keep_gates: bool) -> list:
    """The recurrence's loop (lstm_recurrence's equations) over `steps` steps, xw_t read as
    step_input(t) [D, B, 4H], from h_0 = c_0 = zeros [D, B, H]: the TensorArrays of h_t and
    c_t, and with keep_gates those of the activations BPTT reads (sigmoid of i, f, o; tanh of
    g). One loop for both callers, so that lstm_forward runs exactly lstm_recurrence's step."""
    units = recurrent.shape[1]
    kernels = tf.unstack(recurrent)  # D x [H, 4H]

    def forward(t, h, c, *arrays):
        z = step_input(t) + _per_direction(h, kernels)  # [D, B, 4H]
        sig, g = tf.split(z, [3 * units, units], axis=-1)
        sig, g = tf.sigmoid(sig), tf.tanh(g)
        i, f, o = tf.split(sig, 3, axis=-1)
        c = f * c + i * g
        h = o * tf.tanh(c)
        return (t + 1, h, c, *(a.write(t, x) for a, x in zip(arrays, (h, c, sig, g))))

    arrays = tuple(tf.TensorArray(zeros.dtype, size=steps) for _ in range(4 if keep_gates else 2))
    _, _, _, *arrays = tf.while_loop(
        lambda t, *_: t < steps, forward, (tf.constant(0), zeros, zeros, *arrays),
        maximum_iterations=steps)
    return arrays


class _Tracing(threading.local):
    forward_only = False


_tracing = _Tracing()


@contextlib.contextmanager
def forward_only():
    """Within it, `fused_bilstm` traces `lstm_forward` instead of `lstm_recurrence`: for a
    pass that takes no gradient (a search encoding its articles), which then keeps no gate
    activations for BPTT and reads the input projections where the batched matmul leaves them
    (no transposed copy, no TensorArray of them): less memory, the same numbers. A gradient
    taken through it anyway is TensorFlow's autodiff of the loop (right, only slower)."""
    before, _tracing.forward_only = _tracing.forward_only, True
    try:
        yield
    finally:
        _tracing.forward_only = before


def lstm_forward(xw, recurrent):
    """lstm_recurrence's forward pass alone (the same loop), for inputs laid out
    direction-major: xw float [D, L, B, 4H], step t read as xw[:, t].

    Returns hs, cs: float [L, D, B, H], as lstm_recurrence's."""
    zeros = tf.zeros(tf.stack([tf.shape(xw)[0], tf.shape(xw)[2], recurrent.shape[1]]), xw.dtype)
    hs, cs = _forward_loop(lambda t: tf.gather(xw, t, axis=1), tf.shape(xw)[1], zeros,
                           recurrent, keep_gates=False)
    return hs.stack(), cs.stack()


@tf.custom_gradient
def lstm_recurrence(xw, recurrent):
    """The LSTM recurrence over inputs projected beforehand, with its backward pass (BPTT)
    written out.

        z_t = xw_t + h_{t-1} R;  i, f, o = sigmoid(z_t[:3H]);  g = tanh(z_t[3H:])
        c_t = f c_{t-1} + i g;   h_t = o tanh(c_t);            h_0 = c_0 = 0

    Autodiff of the while loop computes R's gradient inside the backward loop, a small
    [H, B] x [B, 4H] matmul and an add into the running sum every step; here the backward loop
    only carries dh, dc and writes dz_t, and R's gradient is one matmul after it,
    sum_t h_{t-1}^T dz_t over all steps at once (the same sum; tests/ops/test_lstm_recurrence.py
    checks it against autodiff of the plain loop, tests/layers/test_encoder.py against the
    Keras layer). Its share of a training step: docs/performance.md.

    Each step multiplies the D directions' states by their recurrent kernels one direction at a
    time (`_per_direction`), not as one [D, B, H] x [D, H, 4H] batched matmul: at small batches
    oneDNN runs the batched matmul slower than the plain ones (docs/results/index.md "Performance").

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
    hs, cs, sigs, gs = _forward_loop(inputs.read, steps, zeros, recurrent, keep_gates=True)
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


def check_bidirectional(bilstm: keras.layers.Bidirectional, where: str) -> None:
    """ValueError unless `fused_bilstm` implements everything `bilstm` would compute: a forward
    and a backward LSTM (go_backwards) with the options of ops.check_lstm_options."""
    for layer, backwards in ((bilstm.forward_layer, False), (bilstm.backward_layer, True)):
        check_lstm_options(layer, f"{where} ({layer.name})")
        if layer.go_backwards != backwards:
            raise ValueError(f"{where} ({layer.name}): model.rnn_impl='fused' runs the forward "
                             "then the backward direction only; set model.rnn_impl=keras")


def _weights(bilstm, dtype):
    """(kernel [2, E, 4H], recurrent kernel [2, H, 4H], bias [2, 4H]): forward, backward; gate
    blocks reordered from Keras's i, f, g, o to i, f, o, g, so that one sigmoid covers the
    three gates and one tanh the candidate (fewer kernels a step)."""
    cells = (bilstm.forward_layer.cell, bilstm.backward_layer.cell)

    def stack(name):
        w = tf.stack([tf.cast(getattr(c, name), dtype) for c in cells])
        # split + concat, not slices: their gradients are a concat and a split, where three
        # slices' gradients are three StridedSliceGrads, each writing the whole weight
        i, f, g, o = tf.split(w, 4, axis=-1)
        return tf.concat([i, f, o, g], axis=-1)

    return stack("kernel"), stack("recurrent_kernel"), stack("bias")


def _sequence(seq, lengths):
    """seq: [L, 2, B, H] per-step h, time-major (forward; backward in reversed time)
    -> [B, L, 2H] batch-major, both directions in article order. One transpose, then an
    unstack of the leading axis: slicing seq[:, d] instead differentiates into a
    StridedSliceGrad per direction, each writing a whole [L, 2, B, H] tensor
    (docs/performance.md)."""
    fw, bw = tf.unstack(tf.transpose(seq, [1, 2, 0, 3]))  # [B, L, H] each
    bw = tf.reverse_sequence(bw, lengths, seq_axis=1, batch_axis=0)
    return tf.concat([fw, bw], axis=-1)


def _final(seq, lengths):
    """seq: [L, 2, B, H] -> the values at step length - 1 of both directions, [B, 2H] (zero
    for an empty article, as the masked Keras layer gives)."""
    b = tf.shape(lengths)[0]
    last = tf.broadcast_to(tf.maximum(lengths - 1, 0)[:, None], [b, 2])
    direction = tf.broadcast_to(tf.range(2)[None, :], [b, 2])
    example = tf.broadcast_to(tf.range(b)[:, None], [b, 2])
    final = tf.gather_nd(seq, tf.stack([last, direction, example], axis=-1))  # [B, 2, H]
    final = tf.reshape(final, [b, 2 * seq.shape[-1]])
    return tf.where((lengths > 0)[:, None], final, tf.zeros_like(final))


def fused_bilstm(bilstm: keras.layers.Bidirectional, emb, lengths):
    """What `bilstm(emb, mask)` computes (return_sequences and return_state), from its weights.

    Both directions run in one `tf.while_loop` over [2, B, H] states (`lstm_recurrence`), their
    input projections computed before it in one batched matmul, the backward direction fed its
    article reversed by length (`tf.reverse_sequence`), so no step masks anything;
    XLA-compilable. Within `forward_only()`, the loop is `lstm_forward`. Steps past an
    article's length run on padding: their outputs are left for the caller to zero and the
    final states are read at step length - 1.

    Args:
      emb: float [B, L, E]; lengths: int32 [B].
    Returns:
      outputs float [B, L, 2H] (arbitrary at padding); h, c float [B, 2H] ([forward; backward]).
    """
    kernel, recurrent, bias = _weights(bilstm, emb.dtype)
    x = tf.transpose(emb, [1, 0, 2])  # [L, B, E]
    steps, b, e = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[2]
    x = tf.stack([x, tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)])
    # Both directions' input projections before the loop, in one (batched) matmul:
    # [2, L*B, E] x [2, E, 4H].
    xw = tf.matmul(tf.reshape(x, [2, -1, e]), kernel) + bias[:, None, :]
    xw = tf.reshape(xw, [2, steps, b, -1])  # [2, L, B, 4H]
    if _tracing.forward_only:
        hs, cs = lstm_forward(xw, recurrent)  # [L, 2, B, H] each
    else:
        hs, cs = lstm_recurrence(tf.transpose(xw, [1, 0, 2, 3]), recurrent)
    return _sequence(hs, lengths), _final(hs, lengths), _final(cs, lengths)
