"""A beam step's attention (beams=True, coverage) whole vs. in N pieces of articles, each
piece a separate call of the layer (W_s s_t formed per piece), as independent ops:

    B=64 L=100 python attn_chunks.py [N ...]

attn_variants.py takes its layer, inputs and timing from here.
"""
import os
import sys
import time

from pgn_tf.utils import onednn

onednn.start()
import tensorflow as tf  # noqa: E402

from pgn_tf.layers.attention import BahdanauAttention  # noqa: E402

b, K, L, A, Q = int(os.environ.get("B", 64)), 4, int(os.environ.get("L", 100)), 256, 512
att = BahdanauAttention(A, use_coverage=True)
att.build((None, None, 256), Q)
att.w_c.assign(tf.random.normal([A]) * 0.1)
feats = tf.random.normal([b, L, A])
mask = tf.ones([b * K, L], tf.bool)
query = tf.random.normal([b * K, Q])
cov = tf.random.uniform([b * K, L])


def make(n):
    def f(feats, mask, query, cov):
        if n == 1:
            return att.alignment(feats, mask, query, cov, beams=True)
        bb = tf.shape(feats)[0]
        sizes = bb // n + tf.cast(tf.range(n) < bb % n, tf.int32)
        fs = tf.split(feats, sizes, num=n)
        ms, qs, cs = (tf.split(t, sizes * K, num=n) for t in (mask, query, cov))
        return tf.concat([att.alignment(fs[i], ms[i], qs[i], cs[i], beams=True)
                          for i in range(n)], 0)
    return tf.function(f, autograph=False)



def best_ms(f, *args):
    """The fastest of 5 runs of 20 calls of f(*args), in ms a call."""
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(20):
            f(*args)
        best = min(best, (time.perf_counter() - t) / 20)
    return best * 1e3


def main():
    ref = None
    for n in [int(x) for x in sys.argv[1:]] or [1, 4, 8, 16, 32, 64]:
        f = make(n)
        out = f(feats, mask, query, cov)
        ref = out if ref is None else ref
        same = bool(tf.reduce_all(out == ref))
        again = bool(tf.reduce_all(f(feats, mask, query, cov) == out))
        print(f"chunks {n:3d}: {best_ms(f, feats, mask, query, cov):7.2f} ms  "
              f"identical={same} repeatable={again}", flush=True)


if __name__ == "__main__":
    main()
