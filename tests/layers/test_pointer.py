import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.layers.pointer import (
    PointerSwitch,
    final_distribution,
    scatter_copy,
    target_log_prob,
    vocab_log_prob,
)
from tests.helpers import run_layer_test


def _np_final(vocab_dist, attn, p_gen, ext_ids, n_extra):
    """See et al. eq. 9 with explicit loops."""
    b, v = vocab_dist.shape
    out = np.zeros((b, v + n_extra))
    for i in range(b):
        out[i, :v] = p_gen[i] * vocab_dist[i]
        for j, w in enumerate(ext_ids[i]):
            out[i, w] += (1 - p_gen[i]) * attn[i, j]
    return out


@pytest.mark.parametrize("fused", [True, False])
def test_scatter_add_matches_numpy_with_repeated_and_oov_words(fused):
    rng = np.random.default_rng(1)
    vocab_dist = rng.dirichlet(np.ones(5), size=2).astype("float32")
    attn = rng.dirichlet(np.ones(4), size=2).astype("float32")
    p_gen = np.array([0.3, 0.9], "float32")
    ext_ids = np.array([[1, 5, 1, 6], [6, 6, 2, 0]], "int32")  # 5, 6 are OOVs; repeats sum
    got = final_distribution(vocab_dist, attn, p_gen[:, None], ext_ids, 2, fused).numpy()
    np.testing.assert_allclose(got, _np_final(vocab_dist, attn, p_gen, ext_ids, 2), atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)


def test_target_log_prob_equals_log_of_final_distribution():
    rng = np.random.default_rng(2)
    b, t, src, v = 2, 3, 4, 6
    logits = rng.normal(size=(b, t, v)).astype("float32")
    attn = rng.dirichlet(np.ones(src), size=(b, t)).astype("float32")
    z = rng.normal(size=(b, t)).astype("float32")
    ext_ids = np.array([[1, 6, 1, 7], [2, 3, 6, 0]], "int32")
    target = np.array([[1, 6, 7], [6, 4, 2]], "int32")
    got = target_log_prob(logits, target, attn, z, ext_ids).numpy()
    for i in range(b):
        for k in range(t):
            vocab_dist = tf.nn.softmax(logits[i, k]).numpy()
            p = 1 / (1 + np.exp(-z[i, k]))
            full = _np_final(vocab_dist[None], attn[i, k][None], [p], ext_ids[i][None], 2)[0]
            np.testing.assert_allclose(got[i, k], np.log(full[target[i, k]]), rtol=1e-5)


def test_baseline_target_log_prob_is_the_log_softmax_at_the_target():
    """Eq. 5-6 (no pointer): log P_vocab(w*); a target outside the vocabulary is impossible."""
    rng = np.random.default_rng(3)
    b, t, v = 2, 3, 6
    logits = rng.normal(size=(b, t, v)).astype("float32")
    target = np.array([[1, 5, 0], [6, 2, 4]], "int32")  # 6 = an article OOV: not generable
    got = target_log_prob(logits, target).numpy()
    for i in range(b):
        for k in range(t):
            z = logits[i, k].astype(np.float64)
            log_softmax = z - z.max() - np.log(np.exp(z - z.max()).sum())
            if target[i, k] < v:
                np.testing.assert_allclose(got[i, k], log_softmax[target[i, k]], rtol=1e-5)
            else:
                # finite, so no inf - inf = NaN downstream
                assert np.isfinite(got[i, k]) and got[i, k] <= -1e29


@pytest.mark.parametrize("fused", [True, False])
def test_the_vocabulary_log_prob_gradient_is_softmax_minus_the_target_one_hot(fused):
    """The training loss's vocabulary half against NumPy: d log P_vocab(w*) / d logits =
    onehot(w*) - softmax, and zero for a target outside the vocabulary (an article OOV)."""
    rng = np.random.default_rng(4)
    logits = tf.Variable(rng.normal(size=(4, 7)).astype("float32"))
    target = tf.constant([3, 0, 9, 6])  # 9 >= V = 7: copy-only
    weights = np.array([1.0, -2.0, 5.0, 0.5], "float32")
    with tf.GradientTape() as tape:
        lp = vocab_log_prob(logits, target, fused)
        total = tf.reduce_sum(lp * tf.where(target < 7, weights, 0.0))
    got = tape.gradient(total, logits).numpy()
    z = logits.numpy().astype(np.float64)
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    want = np.zeros_like(z)
    for i, (w, t) in enumerate(zip(weights, target.numpy())):
        if t < 7:
            want[i] = w * (np.eye(7)[t] - softmax[i])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lp.numpy()[[0, 1, 3]], np.log(softmax[[0, 1, 3], [3, 0, 6]]),
                               rtol=1e-5)
    assert lp.numpy()[2] <= -1e29


def test_the_written_out_gradient_equals_autodiff_on_a_batch_by_time_grid():
    """vocab_log_prob's hand-written gradient (fused: pgn_tf.ops.log_softmax_at) against TF's
    autodiff of the plain formula and of its own fused=False path, on [B, T, V] logits with OOV
    targets and an upstream gradient on every entry."""
    rng = np.random.default_rng(5)
    logits = tf.Variable(rng.normal(scale=3.0, size=(2, 3, 6)).astype("float32"))
    target = tf.constant([[1, 5, 0], [6, 2, 8]])  # 6, 8 >= V: copy-only
    upstream = tf.constant(rng.normal(size=(2, 3)).astype("float32"))

    def plain(x):
        picked = tf.gather(x, tf.minimum(target, 5), batch_dims=2)
        return tf.where(target < 6, picked - tf.reduce_logsumexp(x, axis=-1), -1e30)

    grads = []
    for fn in (lambda x: vocab_log_prob(x, target), plain,
               lambda x: vocab_log_prob(x, target, fused=False)):
        with tf.GradientTape() as tape:
            out = fn(logits)
            total = tf.reduce_sum(tf.where(target < 6, out, 0.0) * upstream)
        grads.append(tape.gradient(total, logits).numpy())
        np.testing.assert_allclose(out.numpy(), plain(logits).numpy(), rtol=1e-5)
    for other in grads[1:]:
        np.testing.assert_allclose(grads[0], other, rtol=1e-5, atol=1e-6)
    assert not grads[0][1, 0].any() and grads[0][0, 0].any()


def test_nan_free_at_saturated_p_gen_missing_targets_and_empty_articles():
    logits = tf.Variable(tf.random.normal([1, 3, 5]))
    attn = tf.Variable(tf.constant([[[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]]))  # step 0, 2: empty
    z = tf.Variable([[80.0, -80.0, 0.0]])  # p_gen = 1, 0, 0.5
    ext_ids = tf.constant([[5, 0]])
    target = tf.constant([[5, 2, 6]])  # copy-only word with p_gen=1; vocab word with p_gen=0
    with tf.GradientTape() as tape:
        lp = target_log_prob(logits, target, attn, z, ext_ids)
        loss = -tf.reduce_sum(lp)
    grads = tape.gradient(loss, [logits, attn, z])
    assert np.all(np.isfinite(lp.numpy()))
    for g in grads:
        assert np.all(np.isfinite(tf.convert_to_tensor(g).numpy()))


def test_switch_contract():
    run_layer_test(
        PointerSwitch, {}, build=lambda layer: layer.build(6),
        call=lambda layer: layer([tf.ones([2, 4]), tf.ones([2, 2])]),
        expected_num_weights=2, expected_shapes=[(2, 1)],
    )


@pytest.mark.parametrize("fused", [True, False])
def test_scatter_copy_gradient_gathers(fused):
    """fused: a bincount whose gradient pgn_tf.ops.bincount_grad registers; else a segment sum
    that TF differentiates: the same values and gradients."""
    attn = tf.Variable([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])
    ids = tf.constant([[1, 3, 1], [0, 2, 2]])
    up = tf.constant([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    with tf.GradientTape() as tape:
        out = scatter_copy(attn, ids, 4, fused)
        loss = tf.reduce_sum(out * up)
    np.testing.assert_allclose(out.numpy(), [[0, 0.7, 0, 0.3], [0.6, 0, 0.4, 0]], atol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, attn).numpy(), [[2, 4, 2], [5, 7, 7]])
