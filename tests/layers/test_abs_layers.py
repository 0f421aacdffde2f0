"""Rush et al. (2015) layers against NumPy references of eq. 1-8."""

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.abs_encoder import ABSEncoder
from pgn_tf.layers.nnlm import NNLMDecoder, context_windows

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


def test_conv_encoder_ignores_padding_and_empty_articles():
    enc = ABSEncoder("conv", V, H, D, C, conv_layers=2)
    enc.build()
    ids = rng.integers(4, V, (1, 8))
    short = enc.precompute(tf.constant(ids), tf.ones([1, 8], bool))["vector"]
    padded_ids = np.concatenate([ids, rng.integers(4, V, (1, 5))], axis=1)  # junk after the end
    mask = tf.constant([[True] * 8 + [False] * 5])
    padded = enc.precompute(tf.constant(padded_ids), mask)["vector"]
    # Up to the convolution's look at the boundary, the extra positions change nothing.
    assert short.shape == (1, H) and np.all(np.abs(short.numpy()) <= 1.0)
    np.testing.assert_allclose(padded.numpy(), short.numpy(), atol=1e-6)
    empty = enc.precompute(tf.constant(ids), tf.zeros([1, 8], bool))["vector"]
    np.testing.assert_array_equal(empty.numpy(), 0.0)


def test_unknown_encoder_is_an_error():
    with pytest.raises(ValueError, match="abs_encoder"):
        ABSEncoder("lstm", V, H, D, C)
