import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.attention import BahdanauAttention, IntraTemporalAttention, masked_softmax
from tests.helpers import run_layer_test


def _np_attention(layer, enc, mask, query, coverage):
    """See et al. eq. 11, 2, 3 in NumPy."""
    w_h = layer.w_h.kernel.numpy()
    w_s, b = layer.w_s.kernel.numpy(), layer.w_s.bias.numpy()
    v, w_c = layer.v.numpy(), layer.w_c.numpy()
    e = np.tanh(enc @ w_h + (query @ w_s + b)[:, None, :] + coverage[:, :, None] * w_c) @ v
    e = np.where(mask, e, -np.inf)
    a = np.exp(e - e.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    return np.einsum("bl,bld->bd", a, enc), a


def test_matches_numpy_reference_with_coverage_and_mask():
    rng = np.random.default_rng(0)
    layer = BahdanauAttention(6, use_coverage=True)
    layer.build((None, None, 4), 5)
    layer.w_c.assign(rng.normal(size=6).astype("float32"))
    enc = rng.normal(size=(2, 3, 4)).astype("float32")
    mask = np.array([[True, True, True], [True, True, False]])
    query = rng.normal(size=(2, 5)).astype("float32")
    cov = rng.uniform(size=(2, 3)).astype("float32")
    ctx, attn = layer(layer.precompute(enc), enc, mask, query, cov)
    ref_ctx, ref_attn = _np_attention(layer, enc, mask, query, cov)
    np.testing.assert_allclose(attn.numpy(), ref_attn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ctx.numpy(), ref_ctx, rtol=1e-5, atol=1e-6)
    assert attn.numpy()[1, 2] == 0.0


def test_beams_broadcast_each_article_over_its_hypotheses():
    """beams=True: each article's encoder outputs held once ([b, L, ...]) for its K rows
    equal the NumPy reference on the tiled [b*K, L, ...] tensors (eq. 11, 2, 3)."""
    rng = np.random.default_rng(1)
    layer = BahdanauAttention(6, use_coverage=True)
    layer.build((None, None, 4), 5)
    layer.w_c.assign(rng.normal(size=6).astype("float32"))
    b, k = 2, 3
    enc = rng.normal(size=(b, 4, 4)).astype("float32")
    mask = np.repeat(np.array([[True, True, True, True], [True, True, False, False]]), k, 0)
    query = rng.normal(size=(b * k, 5)).astype("float32")
    cov = rng.uniform(size=(b * k, 4)).astype("float32")
    ctx, attn = layer(layer.precompute(enc), enc, mask, query, cov, beams=True)
    want_ctx, want_attn = _np_attention(layer, np.repeat(enc, k, 0), mask, query, cov)
    np.testing.assert_allclose(attn.numpy(), want_attn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ctx.numpy(), want_ctx, rtol=1e-5, atol=1e-6)
    assert attn.shape == (b * k, 4) and ctx.shape == (b * k, 4)


def test_a_beam_step_holds_one_full_size_sum_buffer():
    """beams=True under a tf.function (as the search runs it): the [B, L, A] sum of eq. 11 is
    formed in one buffer, not two (grappler regrouping the adds, a coverage term added to a
    separate sum). TensorFlow's allocator counts the bytes (oneDNN's, on by the suite's
    start-up: pgn_tf.utils.onednn); the bound is 1.5 buffers, the rest of the step being
    [B, L] and [B, A] tensors."""
    rng = np.random.default_rng(2)
    b, k, length, d, a = 16, 4, 200, 32, 128
    layer = BahdanauAttention(a, use_coverage=True)
    layer.build((None, None, d), 24)
    layer.w_c.assign(rng.normal(size=a).astype("float32"))
    enc = tf.constant(rng.normal(size=(b, length, d)).astype("float32"))
    feats = layer.precompute(enc)
    mask = tf.ones([b * k, length], tf.bool)
    query = tf.constant(rng.normal(size=(b * k, 24)).astype("float32"))
    cov = tf.constant(rng.uniform(size=(b * k, length)).astype("float32"))
    step = tf.function(lambda: layer.alignment(feats, mask, query, cov, beams=True))
    want = step().numpy()
    tf.config.experimental.reset_memory_stats("CPU:0")
    held = tf.config.experimental.get_memory_info("CPU:0")["current"]
    np.testing.assert_array_equal(step().numpy(), want)
    transient = tf.config.experimental.get_memory_info("CPU:0")["peak"] - held
    full = b * k * length * a * 4
    assert full < transient < 1.5 * full, (transient / full)


def test_empty_article_gives_zero_attention_not_nan():
    probs = masked_softmax(tf.zeros([2, 3]), tf.constant([[False] * 3, [True, False, False]]))
    np.testing.assert_array_equal(probs.numpy(), [[0, 0, 0], [1, 0, 0]])


def test_layer_contract():
    rng = np.random.default_rng(1)
    enc = tf.constant(rng.normal(size=(2, 3, 4)).astype("float32"))
    mask = tf.constant([[True, True, True], [True, True, False]])
    query = tf.constant(rng.normal(size=(2, 4)).astype("float32"))
    cov = tf.constant(rng.uniform(size=(2, 3)).astype("float32"))
    run_layer_test(
        BahdanauAttention,
        {"attn_dim": 4, "use_coverage": True},
        build=lambda layer: layer.build((None, None, 4), 4),
        call=lambda layer: layer(layer.precompute(enc), enc, mask, query, cov),
        expected_num_weights=5,  # W_h, W_s, b_attn, v, w_c
        expected_shapes=[(2, 4), (2, 3)],
    )


@pytest.mark.parametrize("temporal", [True, False])
def test_intra_temporal_layer_contract(temporal):
    rng = np.random.default_rng(2)
    enc = tf.constant(rng.normal(size=(2, 5, 4)).astype("float32"))
    mask = tf.constant([[True] * 5, [True] * 3 + [False] * 2])
    query = tf.constant(rng.normal(size=(2, 6)).astype("float32"))
    past = tf.constant(rng.normal(size=(2, 5)).astype("float32"))  # a step t > 1
    run_layer_test(
        IntraTemporalAttention,
        {"query_dim": 6, "temporal": temporal},
        build=lambda layer: layer.build((None, None, 4)),
        call=lambda layer: layer(layer.precompute(enc), enc, mask, query, past),
        expected_num_weights=1,  # W_attn^e (eq. 2)
        expected_shapes=[(2, 4), (2, 5), (2, 5)],  # context, attn, running log-sum-exp
    )
