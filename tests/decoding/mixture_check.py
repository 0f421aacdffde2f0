"""The check both mixture tests make: the beam search's candidates from a Mixture equal a
full top-k over its dense distribution under the same constraints."""

import numpy as np
import tensorflow as tf

from pgn_tf.decoding.candidates import top_candidates
from pgn_tf.decoding.constraints import NEG_INF
from pgn_tf.decoding.mixture import mixture_candidates
from pgn_tf.layers.pointer import dense_distribution


def assert_candidates_match_dense(mix, constraints, seq, step, alive, pool):
    """mixture_candidates against top_candidates of the constrained dense distribution;
    returns (the mixture's candidates, the valid mask [B, pool], the dense log-probs)."""
    dense = constraints.apply(dense_distribution(mix), tf.constant(seq), step)
    want = top_candidates(dense, tf.constant(alive), pool)
    got = mixture_candidates(mix, constraints, tf.constant(seq), step, tf.constant(alive), pool)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5)
    valid = want[0].numpy() > NEG_INF / 2
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(g.numpy()[valid], w.numpy()[valid])
    return got, valid, dense
