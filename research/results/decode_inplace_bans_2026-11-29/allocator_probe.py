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
from tests.decoding.test_mixture import search_step  # noqa: E402


def scatter_bans(logits, n, rows, cols):
    return tf.tensor_scatter_nd_min(tf.nn.softmax(logits), tf.stack([rows, cols], 1),
                                    tf.fill(tf.shape(rows), -1.0))


def main() -> None:
    if sys.argv[1] == "scatter":
        mixture._softmax_banned_in_place = scatter_bans
    rng = np.random.default_rng(1)
    for vocab in (20000, 40000, 80000):
        step, n = search_step(rng, vocab)
        step()
        for _ in range(2):
            tf.config.experimental.reset_memory_stats("CPU:0")
            held = tf.config.experimental.get_memory_info("CPU:0")["current"]
            step()
            t = tf.config.experimental.get_memory_info("CPU:0")["peak"] - held
            print(sys.argv[1], vocab, t, t / (n * vocab * 4))


if __name__ == "__main__":
    main()
