"""At commit 52da66c (its BahdanauAttention._beam_piece, W_s s_t formed once for every row):
the layer's loop over pieces of about 4 MiB, static splits into P pieces, and the sum whole.

    B=64 L=100 python attn_variants.py
"""
import os
import time

from pgn_tf.utils import onednn

onednn.start()
import tensorflow as tf  # noqa: E402

from pgn_tf.layers.attention import BahdanauAttention, masked_softmax  # noqa: E402

b, K, L, A, Q = int(os.environ.get("B", 64)), 4, int(os.environ.get("L", 100)), 256, 512
att = BahdanauAttention(A, use_coverage=True)
att.build((None, None, 256), Q)
att.w_c.assign(tf.random.normal([A]) * 0.1)
feats = tf.random.normal([b, L, A])
mask = tf.ones([b * K, L], tf.bool)
query = tf.random.normal([b * K, Q])
cov = tf.random.uniform([b * K, L])


def split_variant(pieces):
    def f(feats, mask, query, cov):
        q = att.w_s(query)
        bb = tf.shape(feats)[0]
        k, length = tf.shape(q)[0] // bb, tf.shape(feats)[1]
        sizes = bb // pieces + tf.cast(tf.range(pieces) < bb % pieces, tf.int32)
        fs = tf.split(feats, sizes, num=pieces)
        qs = tf.split(q, sizes * k, num=pieces)
        cs = tf.split(cov, sizes * k, num=pieces)
        sc = tf.concat([tf.reshape(att._beam_piece(fs[i], qs[i], cs[i]), [-1, length])
                        for i in range(pieces)], 0)
        return masked_softmax(sc, mask)
    return f


fns = {"while_4MiB": tf.function(lambda f, m, q, c: att.alignment(f, m, q, c, beams=True),
                                 autograph=False)}
for p in (4, 8, 16):
    fns[f"split_{p}"] = tf.function(split_variant(p), autograph=False)
ref = fns["while_4MiB"](feats, mask, query, cov)
saved = att.BEAM_PIECE_BYTES
att.BEAM_PIECE_BYTES = 1 << 40  # traced once, whole
fns["whole"] = tf.function(lambda f, m, q, c: att.alignment(f, m, q, c, beams=True),
                           autograph=False)
fns["whole"](feats, mask, query, cov)
att.BEAM_PIECE_BYTES = saved
for _pass in range(2):
    for name, f in fns.items():
        out = f(feats, mask, query, cov)
        same = bool(tf.reduce_all(out == ref))
        best = 1e9
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(20):
                f(feats, mask, query, cov)
            best = min(best, (time.perf_counter() - t) / 20)
        print(f"{name:12s} {best * 1e3:7.2f} ms identical={same}", flush=True)
