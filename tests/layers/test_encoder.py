"""The See et al. (2017) encoder against a NumPy bidirectional LSTM with masking and the ReLU
state reduction (their code's `_reduce_states`)."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.encoder import BiLSTMEncoder
from tests.helpers import run_layer_test

B, L, E, H = 2, 5, 3, 4


def encoder_weights(layer):
    """The encoder's weights by role, as NumPy arrays. The one place that knows their layout
    (read from `layer.weights`); adapt it, and only it, if the encoder's variables change:

      fw, bw: (W [E, 4H], U [H, 4H], b [4H]) of each direction's LSTM, gate blocks in the
              order i, f, c, o along the last axis (Keras LSTMCell: z = x W + h U + b,
              split in four);
      reduce_h, reduce_c: (W [2H, H], b [H]), applied to [fw; bw].
    """
    def pick(scope, name):  # the one weight whose path has `scope` and ends in `name`
        (w,) = [w.numpy() for w in layer.weights
                if scope in w.path and w.path.rsplit("/", 1)[1] == name]
        return w

    out = {d: tuple(pick(f"{scope}_lstm", k) for k in ("kernel", "recurrent_kernel", "bias"))
           for d, scope in (("fw", "forward"), ("bw", "backward"))}
    if layer.reduce_states:
        for name in ("reduce_h", "reduce_c"):
            out[name] = (pick(name, "kernel"), pick(name, "bias"))
    return out


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_lstm(xs, w, u, b):
    """One direction over xs [n, E] from zero state: outputs [n, H], final (h, c) [H]."""
    h = c = np.zeros(u.shape[0])
    outs = []
    for x in xs:
        i, f, g, o = np.split(x @ w + h @ u + b, 4)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outs.append(h)
    return np.array(outs).reshape(len(xs), len(h)), h, c


def np_encoder(emb, lengths, weights, reduce_states):
    """Each article's n valid positions only: forward over 0..n-1, backward over n-1..0
    (padding never seen); outputs [B, L, 2H] zero at padding; h, c [B, H] (or [B, 2H])."""
    outputs = np.zeros(emb.shape[:2] + (2 * H,))
    hs, cs = [], []
    for k, n in enumerate(lengths):
        fw_out, fw_h, fw_c = np_lstm(emb[k, :n], *weights["fw"])
        bw_out, bw_h, bw_c = np_lstm(emb[k, :n][::-1], *weights["bw"])
        outputs[k, :n] = np.concatenate([fw_out, bw_out[::-1]], axis=-1)
        hs.append(np.concatenate([fw_h, bw_h]))
        cs.append(np.concatenate([fw_c, bw_c]))
    h, c = np.array(hs), np.array(cs)
    if reduce_states:
        relu = lambda x, wb: np.maximum(x @ wb[0] + wb[1], 0.0)  # noqa: E731
        h, c = relu(h, weights["reduce_h"]), relu(c, weights["reduce_c"])
    return outputs, h, c


def randomized_encoder(reduce_states, seed=0):
    """An encoder whose weights are far from the 0.02-uniform init, so every nonlinearity and
    the forget gate's memory matter."""
    layer = BiLSTMEncoder(H, reduce_states=reduce_states)
    layer.build((None, None, E))
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(0.0, 0.6, w.shape).astype(np.float32))
    return layer


@pytest.mark.parametrize("reduce_states", [True, False])
def test_matches_numpy_bidirectional_lstm_with_padding(reduce_states):
    layer = randomized_encoder(reduce_states)
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(B, L, E)).astype(np.float32)  # junk (not zeros) at the padding
    lengths = [5, 3]
    mask = np.arange(L)[None, :] < np.array(lengths)[:, None]
    outputs, h, c = layer(tf.constant(emb), tf.constant(mask))
    want_out, want_h, want_c = np_encoder(emb, lengths, encoder_weights(layer), reduce_states)
    assert h.shape == c.shape == (B, H if reduce_states else 2 * H)
    np.testing.assert_allclose(outputs.numpy(), want_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-5, atol=1e-6)


def test_empty_article_gives_zero_outputs_and_the_reduction_of_zero_states():
    layer = randomized_encoder(True, seed=2)
    emb = np.random.default_rng(3).normal(size=(2, 4, E)).astype(np.float32)
    mask = np.array([[False] * 4, [True, True, False, False]])
    outputs, h, c = layer(tf.constant(emb), tf.constant(mask))
    want_out, want_h, want_c = np_encoder(emb, [0, 2], encoder_weights(layer), True)
    np.testing.assert_array_equal(outputs.numpy()[0], 0.0)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)  # row 0: relu(b_h)
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs.numpy(), want_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduce_states, num_weights, state_dim", [
    (True, 10, H),  # 2 x (W, U, b) + reduce_h (W, b) + reduce_c (W, b)
    (False, 6, 2 * H),
])
def test_layer_contract(reduce_states, num_weights, state_dim):
    emb = tf.constant(np.random.default_rng(4).normal(size=(B, L, E)).astype(np.float32))
    mask = tf.constant([[True] * L, [True] * 3 + [False] * 2])
    run_layer_test(
        BiLSTMEncoder, {"hidden_dim": H, "init_mag": 0.1, "reduce_states": reduce_states},
        build=lambda layer: layer.build((None, None, E)),
        call=lambda layer: layer(emb, mask),
        expected_num_weights=num_weights,
        expected_shapes=[(B, L, 2 * H), (B, state_dim), (B, state_dim)],
    )
