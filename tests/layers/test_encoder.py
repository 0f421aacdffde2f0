"""The See et al. (2017) encoder against a NumPy bidirectional LSTM with masking and the ReLU
state reduction (their code's `_reduce_states`), in both implementations: the fused loop (both
directions in one while loop, the backward one over tf.reverse_sequence) and the Keras
Bidirectional layer it replaced, which must agree on the same weights."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.encoder import IMPLEMENTATIONS, BiLSTMEncoder, lstm_recurrence
from tests.helpers import run_layer_test

B, L, E, H = 2, 5, 3, 4


def encoder_weights(layer):
    """The encoder's weights by role, as NumPy arrays. The one place that knows their layout
    (read from `layer.weights`); adapt it, and only it, if the encoder's variables change:

      fw, bw: (W [E, 4H], U [H, 4H], b [4H]) of each direction's LSTM, gate blocks in the
              order i, f, c, o along the last axis (Keras LSTMCell: z = x W + h U + b,
              split in four);
      reduce_h, reduce_c: (W [2H, S], b [S]), applied to [fw; bw] (S = state_dim).
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
    (padding never seen); outputs [B, L, 2H] zero at padding; h, c [B, S] (or [B, 2H])."""
    hid = weights["fw"][1].shape[0]
    outputs = np.zeros(emb.shape[:2] + (2 * hid,))
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


def randomized_encoder(reduce_states, seed=0, implementation="loop", state_dim=None):
    """An encoder whose weights are far from the 0.02-uniform init, so every nonlinearity and
    the forget gate's memory matter."""
    layer = BiLSTMEncoder(H, reduce_states=reduce_states, implementation=implementation,
                          state_dim=state_dim)
    layer.build((None, None, E))
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(0.0, 0.6, w.shape).astype(np.float32))
    return layer


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("reduce_states", [True, False])
def test_matches_numpy_bidirectional_lstm_with_padding(reduce_states, implementation):
    layer = randomized_encoder(reduce_states, implementation=implementation)
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


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_empty_article_gives_zero_outputs_and_the_reduction_of_zero_states(implementation):
    layer = randomized_encoder(True, seed=2, implementation=implementation)
    emb = np.random.default_rng(3).normal(size=(2, 4, E)).astype(np.float32)
    mask = np.array([[False] * 4, [True, True, False, False]])
    outputs, h, c = layer(tf.constant(emb), tf.constant(mask))
    want_out, want_h, want_c = np_encoder(emb, [0, 2], encoder_weights(layer), True)
    np.testing.assert_array_equal(outputs.numpy()[0], 0.0)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)  # row 0: relu(b_h)
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs.numpy(), want_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduce_states", [True, False])
def test_fused_loop_equals_the_keras_layer_with_ragged_lengths_and_gradients(reduce_states):
    """Same weights, ragged lengths (full, short, empty, one short of full) with junk embeddings
    at the padding: equal outputs at every position (padding included), equal final states,
    and equal gradients for every weight and for the embeddings."""
    layers = [randomized_encoder(reduce_states, seed=5, implementation=i, state_dim=3)
              for i in ("keras", "loop")]
    emb = tf.constant(np.random.default_rng(6).normal(size=(4, 6, E)).astype(np.float32))
    mask = tf.sequence_mask([6, 2, 0, 5], 6)
    results = []
    for layer in layers:
        with tf.GradientTape() as tape:
            tape.watch(emb)
            out = layer(emb, mask)
            loss = sum(tf.reduce_sum(tf.sin(3.0 * t)) for t in out)  # a non-linear read of all
        results.append((out, tape.gradient(loss, layer.trainable_weights + [emb])))
    (want, want_grads), (got, got_grads) = results
    assert [t.shape for t in got] == [t.shape for t in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert len(got_grads) == len(want_grads) == (11 if reduce_states else 7)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(),
                                   tf.convert_to_tensor(w).numpy(), rtol=1e-4, atol=1e-5)


def test_state_dim_reduces_to_the_decoder_size():
    """enc_hidden_dim apart from the decoder's H: the 2 x H final states reduce to state_dim."""
    layer = randomized_encoder(True, seed=7, state_dim=7)
    emb = np.random.default_rng(8).normal(size=(B, L, E)).astype(np.float32)
    lengths = [4, 5]
    _, h, c = layer(tf.constant(emb), tf.sequence_mask(lengths, L))
    _, want_h, want_c = np_encoder(emb, lengths, encoder_weights(layer), True)
    assert h.shape == c.shape == (B, 7)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-5, atol=1e-6)


def test_both_implementations_hold_the_same_checkpoint_variables(tmp_path):
    """The fused loop reads the Keras Bidirectional layer's variables, so a checkpoint written
    before it (by the Keras layer) restores into it, names and shapes unchanged."""
    keras_enc = randomized_encoder(True, seed=9, implementation="keras")
    path = tf.train.Checkpoint(encoder=keras_enc).write(str(tmp_path / "ckpt"))
    names = dict(tf.train.list_variables(path))
    for direction in ("forward_layer", "backward_layer"):
        prefix = f"encoder/bilstm/{direction}/cell/"
        assert names[prefix + "kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [E, 4 * H]
        assert names[prefix + "recurrent_kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [H, 4 * H]
        assert names[prefix + "bias/.ATTRIBUTES/VARIABLE_VALUE"] == [4 * H]
    loop_enc = randomized_encoder(True, seed=10, implementation="loop")
    tf.train.Checkpoint(encoder=loop_enc).read(path).assert_existing_objects_matched()
    emb = tf.constant(np.random.default_rng(11).normal(size=(B, L, E)).astype(np.float32))
    mask = tf.sequence_mask([5, 2], L)
    for got, want in zip(loop_enc(emb, mask), keras_enc(emb, mask)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_fused_loop_compiles_with_xla():
    layer = randomized_encoder(True, seed=12)
    emb = tf.constant(np.random.default_rng(13).normal(size=(3, 6, E)).astype(np.float32))
    mask = tf.sequence_mask([6, 1, 0], 6)
    compiled = tf.function(lambda x, m: layer(x, m), jit_compile=True)(emb, mask)
    for got, want in zip(compiled, layer(emb, mask)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_unknown_implementation_is_named():
    with pytest.raises(ValueError, match="unknown encoder implementation 'cudnn'"):
        BiLSTMEncoder(H, implementation="cudnn")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("reduce_states, num_weights, state_shape", [
    (True, 10, 7),  # 2 x (W, U, b) + reduce_h (W, b) + reduce_c (W, b); state_dim 7
    (False, 6, 2 * H),
])
def test_layer_contract(reduce_states, num_weights, state_shape, implementation):
    emb = tf.constant(np.random.default_rng(4).normal(size=(B, L, E)).astype(np.float32))
    mask = tf.constant([[True] * L, [True] * 3 + [False] * 2])
    run_layer_test(
        BiLSTMEncoder, {"hidden_dim": H, "init_mag": 0.1, "reduce_states": reduce_states,
                        "state_dim": 7, "implementation": implementation},
        build=lambda layer: layer.build((None, None, E)),
        call=lambda layer: layer(emb, mask),
        expected_num_weights=num_weights,
        expected_shapes=[(B, L, 2 * H), (B, state_shape), (B, state_shape)],
    )


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
