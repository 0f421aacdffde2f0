"""Rush et al. (2015) layers against NumPy references of eq. 1-8."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.abs_encoder import ABSEncoder
from pgn_tf.layers.nnlm import NNLMDecoder, context_windows
from tests.helpers import run_layer_test

rng = np.random.default_rng(0)
V, H, D, C = 30, 6, 4, 3


def test_context_windows_pad_with_start():
    got = context_windows(tf.constant([[2, 7, 8, 9]]), 3, pad_id=2).numpy()
    assert got.tolist() == [[[2, 2, 2], [2, 2, 7], [2, 7, 8], [7, 8, 9]]]


def test_nnlm_logits_eq_1():
    dec = NNLMDecoder(V, D, H, C)
    dec.build()
    ctx = rng.integers(0, V, (2, C))
    enc = rng.normal(size=(2, H)).astype(np.float32)
    e = dec.embedding.embeddings.numpy()
    y_c = e[ctx].reshape(2, C * D)
    h = np.tanh(y_c @ dec.u.kernel.numpy() + dec.u.bias.numpy())
    want = h @ dec.v.kernel.numpy() + dec.v.bias.numpy() + enc @ dec.w.kernel.numpy()
    np.testing.assert_allclose(dec(tf.constant(ctx), tf.constant(enc)).numpy(), want,
                               rtol=1e-5, atol=1e-5)


def inputs():
    ids = rng.integers(4, V, (2, 9))
    mask = np.array([[1] * 9, [1] * 5 + [0] * 4], bool)
    context = rng.integers(0, V, (2, 4, C))
    return tf.constant(ids), tf.constant(mask), tf.constant(context)


def test_bag_of_words_is_the_mean_input_embedding():
    enc = ABSEncoder("bow", V, H, D, C)
    enc.build()
    ids, mask, context = inputs()
    vec, attn = enc(enc.precompute(ids, mask), mask, context)
    f = enc.f.embeddings.numpy()
    want = np.stack([f[ids.numpy()[b][mask.numpy()[b]]].mean(0) for b in range(2)])
    np.testing.assert_allclose(vec.numpy()[:, 2], want, rtol=1e-5)  # same for every position
    np.testing.assert_allclose(attn.numpy()[1, 0, :5], 0.2)


def test_attention_encoder_eq_8_with_smoothing():
    q = 2
    enc = ABSEncoder("attention", V, H, D, C, smoothing=q)
    enc.build()
    ids, mask, context = inputs()
    vec, attn = enc(enc.precompute(ids, mask), mask, context)
    f, g, p = enc.f.embeddings.numpy(), enc.g.embeddings.numpy(), enc.p.kernel.numpy()
    for b in range(2):
        n = int(mask.numpy()[b].sum())
        x = f[ids.numpy()[b][:n]]  # x~ [n, H]
        x_bar = np.stack([x[max(0, i - q): i + q + 1].sum(0) / q for i in range(n)])
        for t in range(4):
            y = g[context.numpy()[b, t]].reshape(-1)  # y~'_c [C*D]
            s = x @ (y @ p)
            pr = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            np.testing.assert_allclose(attn.numpy()[b, t, :n], pr, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(vec.numpy()[b, t], pr @ x_bar, rtol=1e-4, atol=1e-5)


def _np_tdnn(x, convs, q, norms=None):
    """Eq. 5-7 on one article's valid positions x~ [n, H]: each layer a temporal convolution
    of width 2Q+1 (zeros beyond the ends), max over pairs (a last odd position alone), tanh;
    then the max over what is left. norms: (gamma, beta) a layer, normalising each position's
    convolution output over its channels before the pooling."""
    for i, (kernel, bias) in enumerate(convs):  # kernel [2Q+1, H, H]
        padded = np.pad(x, [(q, q), (0, 0)])
        y = np.stack([np.einsum("kh,khg->g", padded[i: i + 2 * q + 1], kernel)
                      for i in range(len(x))]) + bias  # (7)
        if norms:
            gamma, beta = norms[i]
            y = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
            y = y * gamma + beta
        x = np.tanh(np.stack([y[i: i + 2].max(0) for i in range(0, len(y), 2)]))  # (6)
    return x.max(0)  # (5)


@pytest.mark.parametrize("conv_norm", [False, True])
def test_conv_encoder_eq_5_to_7(conv_norm):
    q = 1
    enc = ABSEncoder("conv", V, H, D, C, smoothing=q, conv_layers=2, conv_norm=conv_norm)
    enc.build()
    for w in enc.weights:  # large enough that tanh and the maxes are not near-linear
        w.assign(rng.normal(0, 0.5, w.shape).astype(np.float32))
    ids, mask, context = inputs()  # lengths 9 (odd at every layer) and 5
    vec, attn = enc(enc.precompute(ids, mask), mask, context)
    f = enc.f.embeddings.numpy()
    convs = [(c.kernel.numpy(), c.bias.numpy()) for c in enc.convs]
    norms = [(n.gamma.numpy(), n.beta.numpy()) for n in enc.norms]
    assert len(norms) == (2 if conv_norm else 0)
    for b in range(2):
        n = int(mask.numpy()[b].sum())
        want = _np_tdnn(f[ids.numpy()[b][:n]], convs, q, norms)
        for t in range(4):  # the same vector for every summary position
            np.testing.assert_allclose(vec.numpy()[b, t], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(attn.numpy(), 0.0)  # no attention in this encoder


def _encoder_output(conv_norm, kernel_scale):
    """The convolutional encoder's vector for 16 articles, its kernels scaled (training on the
    Debian corpus grew them until the third layer's tanh saturated: docs/results/quality.md "Rush et
    al.'s ABS, re-run")."""
    tf.keras.utils.set_random_seed(3)
    enc = ABSEncoder("conv", 200, 32, D, C, conv_layers=3, conv_norm=conv_norm)
    enc.build()
    for conv in enc.convs:
        conv.kernel.assign(conv.kernel * kernel_scale)
    ids = tf.constant(np.random.default_rng(3).integers(4, 200, (16, 24)))
    return enc.precompute(ids, tf.ones([16, 24], bool))["vector"].numpy()


def test_conv_norm_keeps_the_tanh_out_of_saturation():
    """Large kernels drive the unnormalised encoder's tanh to +-1, where no gradient passes;
    normalised, the output does not depend on the kernels' scale (zero biases; once the
    variances dwarf the normalisation's epsilon)."""
    raw = _encoder_output(False, 30.0)
    assert np.mean(np.abs(raw) > 0.99) > 0.85
    normed = _encoder_output(True, 30.0)
    assert np.mean(np.abs(normed) > 0.99) < 0.1
    np.testing.assert_allclose(normed, _encoder_output(True, 300.0), atol=1e-3)
    assert not np.allclose(raw, _encoder_output(False, 1.0), atol=1e-1)


@pytest.mark.parametrize("conv_norm", [False, True])
def test_conv_encoder_ignores_padding_and_empty_articles(conv_norm):
    enc = ABSEncoder("conv", V, H, D, C, conv_layers=2, conv_norm=conv_norm)
    enc.build()
    ids = rng.integers(4, V, (1, 8))
    short = enc.precompute(tf.constant(ids), tf.ones([1, 8], bool))["vector"]
    padded_ids = np.concatenate([ids, rng.integers(4, V, (1, 5))], axis=1)  # junk after the end
    mask = tf.constant([[True] * 8 + [False] * 5])
    padded = enc.precompute(tf.constant(padded_ids), mask)["vector"]
    # Junk ids past the end change nothing, at the boundary of the convolution's window too.
    np.testing.assert_allclose(padded.numpy(), short.numpy(), atol=1e-6)
    empty = enc.precompute(tf.constant(ids), tf.zeros([1, 8], bool))["vector"]
    np.testing.assert_array_equal(empty.numpy(), 0.0)


def test_unknown_encoder_is_an_error():
    with pytest.raises(ValueError, match="abs_encoder"):
        ABSEncoder("lstm", V, H, D, C)


@pytest.mark.parametrize("kind, num_weights", [
    ("bow", 1),  # F
    ("conv", 1 + 2 * 2),  # F, and Q^l with its bias for each of 2 layers
    ("conv_norm", 1 + 2 * 2 + 2 * 2),  # and each layer's normalisation gain and offset
    ("attention", 3),  # F, G, P
])
def test_encoder_layer_contract(kind, num_weights):
    ids, mask, context = inputs()
    run_layer_test(
        ABSEncoder, {"kind": kind.split("_")[0], "vocab_size": V, "hidden_dim": H, "emb_dim": D,
                     "window": C, "conv_layers": 2, "conv_norm": kind == "conv_norm"},
        build=lambda layer: layer.build(),
        call=lambda layer: layer(layer.precompute(ids, mask), mask, context),
        expected_num_weights=num_weights,
        expected_shapes=[(2, 4, H), (2, 4, 9)],  # enc(x, y_c), attention over the article
    )


def test_nnlm_layer_contract():
    ctx = tf.constant(rng.integers(0, V, (2, 4, C)))
    enc = tf.constant(rng.normal(size=(2, 4, H)).astype(np.float32))
    run_layer_test(
        NNLMDecoder, {"vocab_size": V, "emb_dim": D, "hidden_dim": H, "window": C},
        build=lambda layer: layer.build(), call=lambda layer: layer(ctx, enc),
        expected_num_weights=6,  # E, U and its bias, V and its bias, W (eq. 1)
        expected_shapes=[(2, 4, V)],
    )
