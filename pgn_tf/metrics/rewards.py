"""The ROUGE-L reward of Paulus et al. (2017) section 3.2, in the graph.

ROUGE-L F1 (Lin 2004; rouge-score's `rougeL` with beta = 1) between token-id sequences:
    P = LCS / |pred|,  R = LCS / |ref|,  F = 2PR / (P + R)   (0 when either side is empty).

The longest common subsequence comes from tensorflow-text's `metrics.rouge_l` kernel (the
dynamic programme in C++, one pair at a time), which replaced a hand-written vectorised LCS
here: it gives rouge-score's values on ids (tests/metrics/test_rewards.py) and runs inside the
tf.function training step several times faster (docs/performance.md). It is a custom op, so it
stays in training: exported graphs hold core TF ops only, which any TF Serving build runs
(pgn_tf.text says why).
"""

from __future__ import annotations

import tensorflow as tf


def rouge_l_f1(pred: tf.Tensor, pred_len: tf.Tensor, ref: tf.Tensor,
               ref_len: tf.Tensor) -> tf.Tensor:
    """ROUGE-L F1 in [0, 1] per pair. pred: int [B, Tp]; ref: int [B, Tr]; *_len: int [B]
    (tokens past a length are padding). Returns float32 [B]."""
    import tensorflow_text as tf_text  # loads its kernels: only RL training pays for them

    hyp = tf.RaggedTensor.from_tensor(pred, lengths=tf.cast(pred_len, tf.int64))
    refs = tf.RaggedTensor.from_tensor(ref, lengths=tf.cast(ref_len, tf.int64))
    return tf_text.metrics.rouge_l(hyp, refs, alpha=0.5).f_measure
