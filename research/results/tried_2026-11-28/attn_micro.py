"""Micro A/B of the coverage attention's pre-activation: plain (MatMul, Reshape, AddV2) against
one the remapper can fuse (MatMul + BiasAdd + AddV2 on [B*L, A], b_attn moved from W_s s)."""
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

B, L, A, H, T = [int(x) for x in (sys.argv[1:6] if len(sys.argv) > 5 else (256, 100, 256, 512, 30))]
train = os.environ.get("TRAIN") == "1"
rng = np.random.default_rng(0)
E = tf.constant(rng.normal(size=(B, L, A)).astype("float32") * 0.3)
ctx_src = tf.constant(rng.normal(size=(B, L, 256)).astype("float32"))
mask = tf.ones([B, L], tf.bool)
Ws = tf.Variable(rng.normal(size=(H, A)).astype("float32") * 0.05)
bs = tf.Variable(rng.normal(size=(A,)).astype("float32") * 0.1)
wc = tf.Variable(rng.normal(size=(A,)).astype("float32") * 0.1)
v = tf.Variable(rng.normal(size=(A,)).astype("float32") * 0.1)
Wq = tf.Variable(rng.normal(size=(256, H)).astype("float32") * 0.05)
s0 = tf.constant(rng.normal(size=(B, H)).astype("float32"))

def softmax(scores):
    return tf.nn.softmax(scores, axis=-1)

def plain(q, cov):
    feats = E + tf.expand_dims(tf.matmul(q, Ws) + bs, 1)
    shape = tf.shape(feats)
    feats = feats + tf.reshape(tf.matmul(tf.reshape(cov, [-1, 1]), wc[None, :]), shape)
    scores = tf.matmul(tf.reshape(tf.tanh(feats), [-1, A]), v[:, None])
    return softmax(tf.reshape(scores, shape[:2]))

def fused(q, cov):
    feats = tf.reshape(E + tf.expand_dims(tf.matmul(q, Ws), 1), [-1, A])
    pre = tf.nn.bias_add(tf.matmul(tf.reshape(cov, [-1, 1]), wc[None, :]), bs) + feats
    scores = tf.matmul(tf.tanh(pre), v[:, None])
    return softmax(tf.reshape(scores, [B, L]))

def bmm(q, cov):
    x = tf.stack([cov, tf.ones_like(cov)], -1)  # [B, L, 2]
    m = tf.stack([tf.broadcast_to(wc, [B, A]), tf.matmul(q, Ws) + bs], 1)  # [B, 2, A]
    pre = tf.matmul(x, m) + E
    scores = tf.matmul(tf.reshape(tf.tanh(pre), [-1, A]), v[:, None])
    return softmax(tf.reshape(scores, [B, L]))

def make(fn):
    def loop():
        def body(t, s, cov, acc):
            a = fn(s, cov)
            c = tf.einsum("bl,bld->bd", a, ctx_src)
            s = tf.tanh(tf.matmul(c, Wq)) + 0.5 * s
            return t + 1, s, cov + a, acc + tf.reduce_sum(a * cov)
        _, s, cov, acc = tf.while_loop(lambda t, *_: t < T, body,
                                       (tf.constant(0), s0, tf.zeros([B, L]), tf.constant(0.0)))
        return acc + tf.reduce_sum(s)
    if not train:
        return tf.function(loop)
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loop()
        g = tape.gradient(loss, [Ws, bs, wc, v, Wq])
        return loss, g
    return step

fns = {"plain": make(plain), "fused": make(fused), "bmm": make(bmm)}
outs = {k: f() for k, f in fns.items()}
if train:
    for k in ("fused", "bmm"):
        diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(outs["plain"][1], outs[k][1]))
        print(k, "max grad diff", diff, "loss", float(outs["plain"][0]), float(outs[k][0]))
else:
    print("loss", {k: float(o) for k, o in outs.items()})
times = {k: [] for k in fns}
for r in range(6):
    for k, f in (list(fns.items()) if r % 2 == 0 else list(reversed(list(fns.items())))):
        t0 = time.perf_counter()
        for _ in range(3):
            f()
        times[k].append((time.perf_counter() - t0) / 3)
med = {k: float(np.median(v)) for k, v in times.items()}
print(json.dumps({"shape": [B, L, A, H, T], "train": train, "median_s": med,
                  "speedup_over_plain": {k: med["plain"] / m for k, m in med.items()}}))
