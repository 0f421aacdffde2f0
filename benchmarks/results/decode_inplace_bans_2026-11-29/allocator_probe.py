"""TensorFlow's allocator count of one search step's scoring of a Mixture (its logits from a
matmul, the softmax, the bans, the candidates) under a tf.function, in units of one [N, V]
float32 buffer (N = 32 hypotheses), with the bans written in place (`inplace`, the kept code)
or by a scatter (`scatter`, TensorFlow's tensor_scatter_nd_min, which copies its input on the
CPU). The allocator hands out chunks: a free chunk under twice a request serves it whole, so
one buffer counts as 1.0-2.0 and two as 2.0 or more. Run from a checkout of the kept code:

    PYTHONPATH=CHECKOUT python allocator_probe.py inplace|scatter
"""

import sys

from pgn_tf.utils import onednn

onednn.start()
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from pgn_tf.decoding import mixture  # noqa: E402
from pgn_tf.layers.pointer import Mixture, copy_slots  # noqa: E402
from tests.decoding.test_mixture import _banning_constraints  # noqa: E402


def scatter_bans(logits, n, rows, cols):
    return tf.tensor_scatter_nd_min(tf.nn.softmax(logits), tf.stack([rows, cols], 1),
                                    tf.fill(tf.shape(rows), -1.0))


def step_fn(rng, vocab, b=8, beam=4, src_len=20, hidden=16, steps=12):
    n = b * beam
    ext = tf.constant(rng.integers(4, vocab, size=(n, src_len)).astype("int32"))
    slot, first = copy_slots(ext, tf.ones([n, src_len], tf.bool))
    out = tf.constant(rng.normal(size=(n, hidden)).astype("float32"))
    kernel = tf.constant(rng.normal(size=(hidden, vocab)).astype("float32"))
    attn = tf.nn.softmax(tf.constant(rng.normal(size=(n, src_len)).astype("float32")))
    seq = tf.constant(rng.integers(4, vocab, size=(n, steps)).astype("int32"))
    constraints = _banning_constraints(vocab)

    @tf.function
    def step():
        mix = Mixture(logits=tf.matmul(out, kernel), p_gen=tf.fill([n], 0.5), attn=attn,
                      ext_ids=ext, slot=slot, first=first, width=tf.constant(vocab))
        return mixture.mixture_candidates(mix, constraints, seq, tf.constant(5),
                                          tf.zeros([b, beam]), 2 * beam)

    return step, n


def main() -> None:
    if sys.argv[1] == "scatter":
        mixture._softmax_banned_in_place = scatter_bans
    rng = np.random.default_rng(1)
    for vocab in (20000, 40000, 80000):
        step, n = step_fn(rng, vocab)
        step()
        for _ in range(2):
            tf.config.experimental.reset_memory_stats("CPU:0")
            held = tf.config.experimental.get_memory_info("CPU:0")["current"]
            step()
            t = tf.config.experimental.get_memory_info("CPU:0")["peak"] - held
            print(sys.argv[1], vocab, t, t / (n * vocab * 4))


if __name__ == "__main__":
    main()
