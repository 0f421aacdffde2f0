import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.encoder import BiLSTMEncoder
from tests.helpers import run_layer_test


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(x, kernel, recurrent, bias):
    """One direction over x [T, E]: Keras's LSTM (gates i, f, g, o). -> h [T, H], (h, c)."""
    hid = recurrent.shape[0]
    h, c, out = np.zeros(hid), np.zeros(hid), []
    for x_t in x:
        z = x_t @ kernel + h @ recurrent + bias
        i, f, g, o = (z[k * hid:(k + 1) * hid] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out).reshape(len(x), hid), h, c


def numpy_bilstm(emb, lengths, fw, bw):
    """[B, L, E] -> outputs [B, L, 2H] (zero past each length), final h, c [B, 2H]: each
    article alone, unpadded, the backward direction over its reversed tokens."""
    b, steps, _ = emb.shape
    hid = fw[1].shape[0]
    out, hs, cs = np.zeros([b, steps, 2 * hid]), np.zeros([b, 2 * hid]), np.zeros([b, 2 * hid])
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        f_out, f_h, f_c = numpy_lstm(emb[i, :n], *fw)
        b_out, b_h, b_c = numpy_lstm(emb[i, :n][::-1], *bw)
        out[i, :n] = np.concatenate([f_out, b_out[::-1]], axis=-1)
        hs[i], cs[i] = np.concatenate([f_h, b_h]), np.concatenate([f_c, b_c])
    return out, hs, cs


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=[4, 6, 3]).astype(np.float32)
    lengths = np.array([6, 2, 0, 5])  # full, short, empty, one of padding
    return emb, lengths


def _encoders(implementations, **kwargs):
    encs = [BiLSTMEncoder(5, init_mag=0.5, implementation=i, **kwargs) for i in implementations]
    for enc in encs:
        enc.build((None, None, 3))
        for src, dst in zip(encs[0].weights, enc.weights):
            dst.assign(src)
    return encs


def test_fused_loop_equals_a_numpy_bidirectional_lstm(inputs):
    emb, lengths = inputs
    (enc,) = _encoders(["loop"], reduce_states=False)
    cells = enc.bilstm.forward_layer.cell, enc.bilstm.backward_layer.cell
    fw, bw = ([w.numpy() for w in (c.kernel, c.recurrent_kernel, c.bias)] for c in cells)
    mask = tf.sequence_mask(lengths, emb.shape[1])
    out, h, c = enc(tf.constant(emb), mask)
    want = numpy_bilstm(emb.astype(np.float64), lengths, fw, bw)
    for got, ref in zip((out, h, c), want):
        np.testing.assert_allclose(got.numpy(), ref, atol=1e-5)


@pytest.mark.parametrize("reduce_states", [True, False])
def test_fused_loop_equals_the_keras_layer_with_gradients(inputs, reduce_states):
    emb, lengths = inputs
    keras_enc, loop_enc = _encoders(["keras", "loop"], reduce_states=reduce_states, state_dim=4)
    x, mask = tf.constant(emb), tf.sequence_mask(lengths, emb.shape[1])
    results = []
    for enc in (keras_enc, loop_enc):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = enc(x, mask)
            loss = sum(tf.reduce_sum(tf.sin(3.0 * t)) for t in out)  # a non-linear read of all
        results.append((out, tape.gradient(loss, enc.trainable_weights + [x])))
    (want, want_grads), (got, got_grads) = results
    assert [t.shape for t in got] == [t.shape for t in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(),
                                   tf.convert_to_tensor(w).numpy(), atol=1e-5)


def test_variable_layout_is_the_keras_bidirectional_one(tmp_path):
    """Checkpoints written before the fused loop restore: same objects, names and shapes."""
    enc = BiLSTMEncoder(4)
    enc.build((None, None, 3))
    path = tf.train.Checkpoint(encoder=enc).write(str(tmp_path / "ckpt"))
    names = dict(tf.train.list_variables(path))
    for direction in ("forward_layer", "backward_layer"):
        prefix = f"encoder/bilstm/{direction}/cell/"
        assert names[prefix + "kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 16]
        assert names[prefix + "recurrent_kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [4, 16]
        assert names[prefix + "bias/.ATTRIBUTES/VARIABLE_VALUE"] == [16]


def test_encoder_layer_contract(inputs):
    emb, lengths = inputs
    mask = tf.sequence_mask(lengths, emb.shape[1])
    run_layer_test(
        BiLSTMEncoder, dict(hidden_dim=5, state_dim=7),
        build=lambda layer: layer.build((None, None, 3)),
        call=lambda layer: layer(tf.constant(emb), mask),
        expected_num_weights=10,
        expected_shapes=[(4, 6, 10), (4, 7), (4, 7)],
    )


def test_fused_loop_compiles_with_xla(inputs):
    emb, lengths = inputs
    (enc,) = _encoders(["loop"])
    mask = tf.sequence_mask(lengths, emb.shape[1])
    eager = enc(tf.constant(emb), mask)
    compiled = tf.function(lambda x, m: enc(x, m), jit_compile=True)(tf.constant(emb), mask)
    for a, b in zip(eager, compiled):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_unknown_implementation_is_named():
    with pytest.raises(ValueError, match="unknown encoder implementation 'cudnn'"):
        BiLSTMEncoder(4, implementation="cudnn")
