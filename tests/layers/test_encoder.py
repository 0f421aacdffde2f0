"""The See et al. (2017) encoder against a NumPy bidirectional LSTM with masking and the ReLU
state reduction (their code's `_reduce_states`), with both values of rnn_impl: the fused loop
(pgn_tf.ops.lstm_recurrence: both directions in one while loop, the backward one over
tf.reverse_sequence) and the Keras Bidirectional layer, which must agree on the same weights;
the fused loop refuses the Keras layer's options it does not implement, the Keras one honours
them."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.encoder import BiLSTMEncoder
from pgn_tf.ops import lstm_recurrence
from tests.helpers import run_layer_test

B, L, E, H = 2, 5, 3, 4
IMPLEMENTATIONS = ("fused", "keras")


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


def randomized_encoder(reduce_states, seed=0, implementation="fused", state_dim=None,
                       lstm_options=None):
    """An encoder whose weights are far from the 0.02-uniform init, so every nonlinearity and
    the forget gate's memory matter."""
    layer = BiLSTMEncoder(H, reduce_states=reduce_states, rnn_impl=implementation,
                          state_dim=state_dim, lstm_options=lstm_options)
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
              for i in ("keras", "fused")]
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
    loop_enc = randomized_encoder(True, seed=10, implementation="fused")
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
    with pytest.raises(ValueError, match="unknown model.rnn_impl 'cudnn'"):
        BiLSTMEncoder(H, rnn_impl="cudnn")


@pytest.mark.parametrize("options, named", [
    ({"dropout": 0.3}, "dropout=0.3"),
    ({"recurrent_dropout": 0.2}, "recurrent_dropout=0.2"),
    ({"activation": "relu"}, "activation='relu'"),
    ({"use_bias": False}, "use_bias=False"),
])
def test_the_fused_loop_refuses_an_lstm_option_it_would_drop(options, named):
    """The fused loop reads the LSTM's weights only: an option that changes what the Keras
    layer computes is one error naming it and the way out, at construction, and at the call
    when it is set on the layer afterwards."""
    with pytest.raises(ValueError, match=f"does not implement the LSTM option {named}.*"
                                         "model.rnn_impl=keras"):
        BiLSTMEncoder(H, rnn_impl="fused", lstm_options=options)
    layer = randomized_encoder(True, seed=15)
    key, value = next(iter(options.items()))
    if key in ("dropout", "recurrent_dropout"):  # the cells read these at every call
        setattr(layer.bilstm.backward_layer.cell, key, value)
        with pytest.raises(ValueError, match=f"{key}={value}"):
            layer(tf.zeros([B, L, E]), tf.ones([B, L], bool))
    randomized_encoder(True, implementation="keras", lstm_options=options)  # honoured there


def test_the_keras_path_honours_the_lstm_dropout():
    """dropout=0.5 on each direction's LSTM: in training the outputs change (and differ from
    call to call), at inference they equal those of the layer without it, same weights."""
    dropped = randomized_encoder(True, seed=16, implementation="keras",
                                 lstm_options={"dropout": 0.5})
    plain = randomized_encoder(True, seed=16, implementation="keras")
    emb = tf.constant(np.random.default_rng(17).normal(size=(B, L, E)).astype(np.float32))
    mask = tf.sequence_mask([5, 3], L)
    for got, want in zip(dropped(emb, mask, training=False), plain(emb, mask)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    trained = [dropped(emb, mask, training=True)[0].numpy() for _ in range(2)]
    want = plain(emb, mask)[0].numpy()
    assert all(np.abs(t - want).max() > 1e-2 for t in trained)
    assert np.abs(trained[0] - trained[1]).max() > 1e-2


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
                        "state_dim": 7, "rnn_impl": implementation},
        build=lambda layer: layer.build((None, None, E)),
        call=lambda layer: layer(emb, mask),
        expected_num_weights=num_weights,
        expected_shapes=[(B, L, 2 * H), (B, state_shape), (B, state_shape)],
    )



def _call(layer, emb, mask, forward_only):
    with lstm_recurrence.forward_only() if forward_only else contextlib.nullcontext():
        return layer(emb, mask)


def test_forward_only_gives_the_same_numbers_in_less_memory():
    """Within ops.lstm_recurrence.forward_only() (a search encoding its articles) the fused
    encoder runs lstm_forward: bit-identical outputs and states in a tf.function, ragged
    lengths included; a gradient taken through it anyway (TensorFlow's autodiff of the loop)
    equals the written-out one; and it holds less: no gate activations kept for BPTT, no
    transposed copy of the input projections (TensorFlow's allocator counts the bytes)."""
    layer = randomized_encoder(True, seed=7, state_dim=3)
    emb = tf.constant(np.random.default_rng(8).normal(size=(16, 40, E)).astype(np.float32))
    mask = tf.sequence_mask([40, 12, 0, 39] * 4, 40)

    def with_gradients(forward_only):
        with tf.GradientTape() as tape:
            tape.watch(emb)
            out = _call(layer, emb, mask, forward_only)
            loss = sum(tf.reduce_sum(tf.sin(3.0 * t)) for t in out)
        return out, tape.gradient(loss, layer.trainable_weights + [emb])

    want, want_grads = tf.function(lambda: with_gradients(False))()
    got, got_grads = tf.function(lambda: with_gradients(True))()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(),
                                   tf.convert_to_tensor(w).numpy(), rtol=1e-5, atol=1e-6)

    # Memory at sizes the allocator tracks (its small allocations are not counted).
    b, length, e, hid = 32, 60, 32, 64
    big = BiLSTMEncoder(hid)
    big.build((None, None, e))
    emb = tf.constant(np.random.default_rng(9).normal(size=(b, length, e)).astype(np.float32))
    mask = tf.sequence_mask(np.full([b], length), length)

    def transient(forward_only):
        fn = tf.function(lambda: _call(big, emb, mask, forward_only))
        fn()
        tf.config.experimental.reset_memory_stats("CPU:0")
        held = tf.config.experimental.get_memory_info("CPU:0")["current"]
        fn()
        return tf.config.experimental.get_memory_info("CPU:0")["peak"] - held

    projections = 2 * b * length * 4 * hid * 4  # [2, B*L, 4H] float32
    lean, plain = transient(True), transient(False)
    assert 0 < lean < plain - projections / 2, (lean, plain)
