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


def _beam_inputs(b, k, length, d, a, seed=2):
    rng = np.random.default_rng(seed)
    layer = BahdanauAttention(a, use_coverage=True)
    layer.build((None, None, d), 24)
    layer.w_c.assign(rng.normal(size=a).astype("float32"))
    feats = layer.precompute(tf.constant(rng.normal(size=(b, length, d)).astype("float32")))
    mask = tf.constant(np.arange(length)[None, :] < rng.integers(1, length + 1, (b * k, 1)))
    query = tf.constant(rng.normal(size=(b * k, 24)).astype("float32"))
    cov = tf.constant(rng.uniform(size=(b * k, length)).astype("float32"))
    return layer, feats, mask, query, cov


def test_a_beam_step_holds_one_piece_of_the_sum_at_a_time():
    """beams=True under a tf.function (as the search runs it): the [B, L, A] sum of eq. 11 is
    formed a piece of articles at a time, each piece in one buffer, not two (grappler
    regrouping the adds, a coverage term added to a separate sum) and never the whole sum.
    TensorFlow's allocator counts the bytes (oneDNN's, on by the suite's start-up:
    pgn_tf.utils.onednn); the bound is 1.5 pieces, the rest of the step being [B, L] and
    [B, A] tensors."""
    b, k, length, a = 16, 4, 200, 128
    layer, feats, mask, query, cov = _beam_inputs(b, k, length, 32, a)
    piece = 4 * k * length * a * 4  # four articles
    layer.BEAM_PIECE_BYTES = piece + 100
    step = tf.function(lambda: layer.alignment(feats, mask, query, cov, beams=True),
                       autograph=False)
    want = step().numpy()
    tf.config.experimental.reset_memory_stats("CPU:0")
    held = tf.config.experimental.get_memory_info("CPU:0")["current"]
    np.testing.assert_array_equal(step().numpy(), want)
    transient = tf.config.experimental.get_memory_info("CPU:0")["peak"] - held
    assert piece <= transient < 1.5 * piece, (transient / piece)


@pytest.mark.parametrize("b,per_piece", [(5, 1), (5, 2), (7, 3), (4, 9), (0, 2)])
def test_beam_pieces_give_every_score_the_whole_sum_gives(b, per_piece):
    """The pieces (whole articles, the last one short) give bit for bit the attention of the
    sum formed whole (one piece), eagerly and in a tf.function; an empty batch gives [0, L]."""
    k, length, a = 3, 7, 16
    layer, feats, mask, query, cov = _beam_inputs(b, k, length, 8, a, seed=b + per_piece)
    layer.BEAM_PIECE_BYTES = 1 << 40
    whole = layer.alignment(feats, mask, query, cov, beams=True).numpy()
    layer.BEAM_PIECE_BYTES = per_piece * k * length * a * 4
    for run in (lambda: layer.alignment(feats, mask, query, cov, beams=True),
                tf.function(lambda: layer.alignment(feats, mask, query, cov, beams=True),
                            autograph=False)):
        np.testing.assert_array_equal(run().numpy(), whole)
    assert whole.shape == (b * k, length)


def test_beam_attention_under_xla_forms_the_sum_whole():
    """Compiled by XLA (decode.jit_step), where XLA fuses the sum's passes itself, the beam
    path forms the sum whole (no loop over pieces in the cluster) and gives the same
    attention as the pieces, up to XLA's rounding."""
    layer, feats, mask, query, cov = _beam_inputs(5, 3, 7, 8, 16)
    layer.BEAM_PIECE_BYTES = 3 * 7 * 16 * 4
    plain = layer.alignment(feats, mask, query, cov, beams=True).numpy()
    compiled = tf.function(lambda f, m, q, c: layer.alignment(f, m, q, c, beams=True),
                           jit_compile=True, autograph=False)
    np.testing.assert_allclose(compiled(feats, mask, query, cov).numpy(), plain,
                               rtol=1e-5, atol=1e-6)
    graph = compiled.get_concrete_function(feats, mask, query, cov).graph
    assert not [op for op in graph.get_operations() if op.type in ("While", "StatelessWhile")]


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
