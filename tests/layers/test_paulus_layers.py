"""Paulus et al. (2017) layers against NumPy references of eq. 2-8 and 13."""

import keras
import numpy as np
import tensorflow as tf

from pgn_tf.layers.attention import IntraTemporalAttention
from pgn_tf.layers.decoder_attention import IntraDecoderAttention
from pgn_tf.layers.tied_projection import TiedOutputProjection
from tests.helpers import run_layer_test

rng = np.random.default_rng(0)


def run_intra_temporal(layer, enc, mask, queries):
    feats = layer.precompute(tf.constant(enc))
    lse = tf.fill(mask.shape, IntraTemporalAttention.NEG_LSE)
    attns, ctxs = [], []
    for q in queries:
        ctx, attn, lse = layer(feats, tf.constant(enc), tf.constant(mask), tf.constant(q), lse)
        attns.append(attn.numpy())
        ctxs.append(ctx.numpy())
    return np.stack(attns), np.stack(ctxs)


def test_intra_temporal_attention_matches_eq_2_to_5():
    b, n, d, steps = 2, 5, 4, 4
    enc = rng.normal(size=(b, n, d)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    queries = rng.normal(size=(steps, b, 6)).astype(np.float32)
    layer = IntraTemporalAttention(6)
    layer.build((None, None, d))
    attns, ctxs = run_intra_temporal(layer, enc, mask, queries)

    w = layer.w_attn.kernel.numpy()  # [d, 6]
    past = np.zeros((b, n))  # sum_{j<t} exp(e_ji)
    for t in range(steps):
        e = np.einsum("bnd,dk,bk->bn", enc, w, queries[t])  # (2)
        e_prime = np.exp(e) if t == 0 else np.exp(e) / past  # (3)
        past += np.exp(e)
        e_prime = e_prime * mask
        alpha = e_prime / e_prime.sum(1, keepdims=True)  # (4)
        np.testing.assert_allclose(attns[t], alpha, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(ctxs[t], np.einsum("bn,bnd->bd", alpha, enc), rtol=1e-4,
                                   atol=1e-5)  # (5)


def test_intra_temporal_attention_is_finite_on_huge_scores():
    """exp(e) would overflow float32 here; the log-space form does not."""
    enc = np.full((1, 600, 3), 40.0, np.float32)
    enc[0, ::7] = -40.0
    layer = IntraTemporalAttention(3)
    layer.build((None, None, 3))
    queries = np.full((5, 1, 3), 30.0, np.float32)
    attns, ctxs = run_intra_temporal(layer, enc, np.ones((1, 600), bool), queries)
    assert np.all(np.isfinite(attns)) and np.all(np.isfinite(ctxs))
    np.testing.assert_allclose(attns.sum(-1), 1.0, rtol=1e-5)


def test_plain_bilinear_attention_when_temporal_is_off():
    enc = rng.normal(size=(1, 4, 3)).astype(np.float32)
    queries = rng.normal(size=(3, 1, 3)).astype(np.float32)
    layer = IntraTemporalAttention(3, temporal=False)
    layer.build((None, None, 3))
    attns, _ = run_intra_temporal(layer, enc, np.ones((1, 4), bool), queries)
    w = layer.w_attn.kernel.numpy()
    e = np.einsum("bnd,dk,bk->bn", enc, w, queries[2])
    np.testing.assert_allclose(attns[2], np.exp(e) / np.exp(e).sum(1, keepdims=True), rtol=1e-5)


def test_intra_decoder_attention_matches_eq_6_to_8():
    b, h, t_max = 2, 4, 6
    history = rng.normal(size=(b, t_max, h)).astype(np.float32)
    query = rng.normal(size=(b, h)).astype(np.float32)
    layer = IntraDecoderAttention(h)
    layer.build()
    ctx0, _ = layer(tf.constant(query), tf.constant(history), tf.constant(0))
    np.testing.assert_array_equal(ctx0.numpy(), 0.0)  # c_1^d = 0
    step = 3
    ctx, attn = layer(tf.constant(query), tf.constant(history), tf.constant(step))
    w = layer.w_attn.kernel.numpy()
    e = np.einsum("bth,kh,bk->bt", history[:, :step], w, query)  # (6): h_t^T W h_t'
    a = np.exp(e) / np.exp(e).sum(1, keepdims=True)  # (7)
    np.testing.assert_allclose(attn.numpy()[:, :step], a, rtol=1e-5)
    np.testing.assert_array_equal(attn.numpy()[:, step:], 0.0)
    np.testing.assert_allclose(ctx.numpy(), np.einsum("bt,bth->bh", a, history[:, :step]),
                               rtol=1e-5, atol=1e-6)  # (8)


def test_tied_projection_is_tanh_of_embedding_times_projection():
    emb = keras.layers.Embedding(7, 3)
    emb.build((None,))
    proj = TiedOutputProjection(emb, 5)
    proj.build()
    feats = rng.normal(size=(2, 5)).astype(np.float32)
    w_out = np.tanh(emb.embeddings.numpy() @ proj.w_proj.numpy())  # (13): [V, F]
    np.testing.assert_allclose(proj(tf.constant(feats)).numpy(),
                               feats @ w_out.T + proj.b_out.numpy(), rtol=1e-5, atol=1e-6)


def test_intra_decoder_layer_contract():
    history = tf.constant(rng.normal(size=(2, 6, 4)).astype(np.float32))
    query = tf.constant(rng.normal(size=(2, 4)).astype(np.float32))
    run_layer_test(
        IntraDecoderAttention, {"hidden_dim": 4}, build=lambda layer: layer.build(),
        call=lambda layer: layer(query, history, tf.constant(3)),  # t > 1: eq. 6-8 act
        expected_num_weights=1,  # W_attn^d
        expected_shapes=[(2, 4), (2, 6)],
    )


def test_tied_projection_layer_contract():
    emb = keras.layers.Embedding(7, 3)
    emb.build((None,))
    feats = tf.constant(rng.normal(size=(2, 5)).astype(np.float32))
    proj = run_layer_test(
        TiedOutputProjection, {"input_dim": 5}, build=lambda layer: layer.build(),
        call=lambda layer: (layer(feats), layer(feats, kernel=layer.kernel())),
        expected_num_weights=3,  # W_proj, b_out and the shared W_emb (eq. 13)
        expected_shapes=[(2, 7), (2, 7)],
        shared_kwargs={"embedding": emb},  # an object shared with the model, not config
    )
    # The step above moved every weight; the embedding among them is the model's own.
    assert any(w is emb.embeddings for w in proj.trainable_weights)
