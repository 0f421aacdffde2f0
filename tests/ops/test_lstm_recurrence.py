"""The encoder's fused recurrence (model.rnn_impl = "fused"): its written-out backward pass
against autodiff of the same recurrence unrolled. tests/layers/test_encoder.py checks the whole
fused encoder against NumPy and the Keras layer."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.ops.lstm_recurrence import lstm_recurrence

H = 4


def plain_recurrence(xw, recurrent):
    """lstm_recurrence's forward pass as a Python loop, for autodiff to differentiate."""
    units = recurrent.shape[1]
    h = c = tf.zeros(list(xw.shape[1:3]) + [units])
    hs, cs = [], []
    for t in range(xw.shape[0]):
        z = xw[t] + tf.matmul(h, recurrent)
        i, f, o = tf.split(tf.sigmoid(z[..., :3 * units]), 3, axis=-1)
        c = f * c + i * tf.tanh(z[..., 3 * units:])
        h = o * tf.tanh(c)
        hs.append(h)
        cs.append(c)
    return tf.stack(hs), tf.stack(cs)


@pytest.mark.parametrize("read_c", [True, False])
def test_written_out_backward_pass_equals_autodiff(read_c):
    """lstm_recurrence's BPTT (the recurrent kernel's gradient summed after the loop) against
    autodiff of the same recurrence unrolled, in a tf.function, for a loss that reads every h_t
    and c_t (or no c_t: its gradient arrives as None) with random weights."""
    rng = np.random.default_rng(14)
    xw = tf.constant(rng.normal(size=(5, 2, 3, 4 * H)).astype(np.float32))
    recurrent = tf.constant(rng.normal(scale=0.5, size=(2, H, 4 * H)).astype(np.float32))
    wh = tf.constant(rng.normal(size=(5, 2, 3, H)).astype(np.float32))
    wc = tf.constant(rng.normal(size=(5, 2, 3, H)).astype(np.float32))

    def grads(fn):
        @tf.function
        def run(xw, recurrent):
            with tf.GradientTape() as tape:
                tape.watch([xw, recurrent])
                hs, cs = fn(xw, recurrent)
                loss = tf.reduce_sum(tf.sin(wh * hs))
                if read_c:
                    loss += tf.reduce_sum(wc * cs * cs)
            return (hs, cs), tape.gradient(loss, [xw, recurrent])
        return run(xw, recurrent)

    (got_h, got_c), got = grads(lstm_recurrence)
    (want_h, want_c), want = grads(plain_recurrence)
    np.testing.assert_allclose(got_h.numpy(), want_h.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_c.numpy(), want_c.numpy(), rtol=1e-5, atol=1e-6)
    for g, w in zip(got, want):
        assert np.abs(w.numpy()).max() > 1e-2
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
