"""The RL gradient-noise benchmark: its statistics against known draws, and one run on the
session's trained model."""

import numpy as np
import pytest

from research.studies import rl_gradient_variance as rgv

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


def test_draw_stats_recover_a_known_signal_and_noise():
    rng = np.random.default_rng(0)
    mean = np.array([3.0, 4.0, 0.0, 0.0])  # |mean| = 5
    draws = mean + rng.normal(0.0, 2.0, size=(4000, 4))  # E|g_s - g|^2 = 4 * 2^2 = 16
    st = rgv.draw_stats(draws)
    assert abs(st["mean_norm"] - 5.0) < 0.1
    assert abs(st["noise"] - 4.0) < 0.1
    assert abs(st["snr"] - 25.0 / 16.0) < 0.1
    # two identical draws: no noise, an infinite SNR, not a division error
    same = rgv.draw_stats(np.stack([mean, mean]))
    assert same["noise"] == 0.0 and same["snr"] == float("inf")
    assert rgv.cosine(mean, -mean) == -1.0 and rgv.cosine(mean, np.zeros(4)) == 0.0


def test_measure_on_a_trained_model(trained_model_dir, corpus):
    out = rgv.measure(trained_model_dir, corpus["validation"], batches=2, samples=3, batch_size=8)
    assert out["batches"] == 2 and out["samples"] == 3 and out["params"] > 0
    # sampled sequences differ between draws, so the single-draw spread is not zero
    assert out["rl_noise"] > 0 and out["ml_norm"] > 0
    assert 0.0 <= out["advantage_zero"] <= 1.0 and -1.0 <= out["cos_rl_ml"] <= 1.0
    assert 0.0 <= out["reward_sample"] <= 1.0 and 0.0 <= out["reward_greedy"] <= 1.0
