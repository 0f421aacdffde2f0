"""At commit 52da66c (its BahdanauAttention._beam_piece, W_s s_t formed once for every row):
the layer's loop over pieces of about 4 MiB, static splits into P pieces, and the sum whole.

    B=64 L=100 python attn_variants.py
"""
# this folder's script first: it starts oneDNN before TensorFlow loads
from attn_chunks import att, best_ms, cov, feats, mask, query  # isort: skip
import tensorflow as tf  # noqa: E402

from pgn_tf.layers.attention import masked_softmax  # noqa: E402


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
        same = bool(tf.reduce_all(f(feats, mask, query, cov) == ref))
        print(f"{name:12s} {best_ms(f, feats, mask, query, cov):7.2f} ms identical={same}",
              flush=True)
