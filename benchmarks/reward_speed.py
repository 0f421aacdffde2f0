"""The self-critical reward: in-graph ROUGE-L (pgn_tf.metrics.rewards) vs rouge-score through
tf.numpy_function, both inside a tf.function as the training step runs them.

    python -m benchmarks.reward_speed [--batch 32] [--length 20] [--iters 200]

Prints ms per batch for each and a JSON line; the two must agree (checked first).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf
from rouge_score import rouge_scorer

from benchmarks.common import emit
from pgn_tf.metrics import rewards

_SCORER = rouge_scorer.RougeScorer(["rougeL"])


def _py_rouge_l(pred, pred_len, ref, ref_len):
    out = np.zeros(len(pred), np.float32)
    for i in range(len(pred)):
        p = " ".join(f"w{t}" for t in pred[i, : pred_len[i]])
        r = " ".join(f"w{t}" for t in ref[i, : ref_len[i]])
        out[i] = _SCORER.score(r, p)["rougeL"].fmeasure
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=20)
    p.add_argument("--iters", type=int, default=200)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    pred = tf.constant(rng.integers(4, 60, (a.batch, a.length)), tf.int32)
    ref = tf.constant(rng.integers(4, 60, (a.batch, a.length)), tf.int32)
    pred_len = tf.constant(rng.integers(1, a.length + 1, a.batch), tf.int32)
    ref_len = tf.constant(rng.integers(1, a.length + 1, a.batch), tf.int32)

    in_graph = tf.function(rewards.rouge_l_f1)

    @tf.function
    def numpy_fn(pred, pred_len, ref, ref_len):
        out = tf.numpy_function(_py_rouge_l, [pred, pred_len, ref, ref_len], tf.float32)
        return tf.ensure_shape(out, [None])

    a_val = in_graph(pred, pred_len, ref, ref_len).numpy()
    b_val = numpy_fn(pred, pred_len, ref, ref_len).numpy()
    np.testing.assert_allclose(a_val, b_val, atol=1e-6)
    result = {"batch": a.batch, "length": a.length}
    for name, fn in (("in_graph", in_graph), ("numpy_function", numpy_fn)):
        t0 = time.perf_counter()
        for _ in range(a.iters):
            fn(pred, pred_len, ref, ref_len).numpy()
        result[f"{name}_ms_per_batch"] = round(1000 * (time.perf_counter() - t0) / a.iters, 3)
    emit("reward_speed", result)


if __name__ == "__main__":
    main()
