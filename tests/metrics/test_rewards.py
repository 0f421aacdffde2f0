"""The in-graph ROUGE-L reward (tensorflow-text's kernel) against rouge-score on random token
sequences."""

import numpy as np
import tensorflow as tf
from rouge_score import rouge_scorer

from pgn_tf.metrics import rewards


def test_rouge_l_matches_rouge_score():
    rng = np.random.default_rng(0)
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    b, tp, tr = 64, 12, 9
    pred = rng.integers(1, 6, size=(b, tp))
    ref = rng.integers(1, 6, size=(b, tr))
    pred_len = rng.integers(0, tp + 1, size=b)
    ref_len = rng.integers(0, tr + 1, size=b)
    ref_len[0], pred_len[1] = 0, 0  # empty reference, empty prediction
    got = rewards.rouge_l_f1(tf.constant(pred), tf.constant(pred_len, tf.int32),
                             tf.constant(ref), tf.constant(ref_len, tf.int32)).numpy()
    for i in range(b):
        p = " ".join(f"w{t}" for t in pred[i, : pred_len[i]])
        r = " ".join(f"w{t}" for t in ref[i, : ref_len[i]])
        want = scorer.score(r, p)["rougeL"].fmeasure
        assert abs(got[i] - want) < 1e-6, (i, p, r, got[i], want)


def test_identical_disjoint_and_partial():
    a = tf.constant([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]])
    b = tf.constant([[1, 2, 3, 4], [5, 6, 7, 8], [2, 9, 4, 0]])
    n = tf.constant([4, 4, 4])
    got = rewards.rouge_l_f1(a, n, b, tf.constant([4, 4, 3])).numpy()
    np.testing.assert_allclose(got, [1.0, 0.0, 2 * (2 / 4) * (2 / 3) / (2 / 4 + 2 / 3)],
                               rtol=1e-6)


def test_reward_inside_a_tf_function_with_int64_ids():
    fn = tf.function(rewards.rouge_l_f1)
    pred = tf.constant([[7, 8, 9, 0, 0]], tf.int64)
    got = fn(pred, tf.constant([3]), pred, tf.constant([2])).numpy()
    np.testing.assert_allclose(got, [2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)], rtol=1e-6)
