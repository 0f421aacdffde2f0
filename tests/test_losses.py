import numpy as np

from pgn_tf import losses


def test_coverage_loss_matches_numpy():
    rng = np.random.default_rng(3)
    attn = rng.dirichlet(np.ones(4), size=(2, 3)).astype("float32")  # [B, T, L]
    coverage = np.concatenate([np.zeros((2, 1, 4)), np.cumsum(attn, 1)[:, :-1]], 1)
    lengths = np.array([3, 2])
    ref = [np.mean([np.minimum(attn[b, t], coverage[b, t]).sum() for t in range(n)])
           for b, n in enumerate(lengths)]
    got = losses.coverage_loss_per_example(attn, coverage.astype("float32"), lengths).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert np.all(got <= 1.0)  # covloss_t <= sum_i a_i = 1 (See et al. section 2.3)


def test_nll_masks_padding_and_survives_empty():
    lp = np.log(np.array([[0.5, 0.25, 0.1], [0.5, 1e-3, 1e-3]], "float32"))
    got = losses.nll_per_example(lp, np.array([2, 0])).numpy()
    np.testing.assert_allclose(got, [(np.log(2) + np.log(4)) / 2, 0.0], rtol=1e-6)
