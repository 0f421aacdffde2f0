"""Micro-benchmark of the vocabulary projection at reference_onmt's sizes (H = 256, V = 20,000),
float32: N = 256 rows (a decoding step, batch 64 x beam 4) and N = 300 (a training batch's real
target tokens). Each form is its own tf.function; the forms run interleaved, 20 calls a form a
round, and the medians of the rounds are printed (wall ms, process CPU ms, GFLOP/s of the one
[N, H] x [H, V] product).

    python vocab_micro.py layouts N     # [N, V] against [V, N] outputs, the gradient's forms
    python vocab_micro.py pieces        # a decoding step's candidates in row pieces
    python vocab_micro.py xla N         # the same products as XLA clusters
    python vocab_micro.py loss N        # the loss' vocabulary half, forward and gradient, in
                                        # the [V, N] layout against the product's [N, V]

Run it once with TF_ENABLE_ONEDNN_OPTS=1 and once with =0 for oneDNN against Eigen.
"""
import sys
import time

import numpy as np
import tensorflow as tf

from pgn_tf.ops.log_softmax_at import log_softmax_at

H, V, K = 256, 20_000, 4
rng = np.random.default_rng(0)


def tensors(n):
    x = tf.constant(rng.standard_normal((n, H)), tf.float32)
    w = tf.Variable((rng.standard_normal((H, V)) * 0.05).astype(np.float32))
    b = tf.Variable((rng.standard_normal(V) * 0.05).astype(np.float32))
    dl = tf.constant(rng.standard_normal((n, V)), tf.float32)
    return x, w, b, dl


def layouts(n):
    x, w, b, dl = tensors(n)
    wt = tf.Variable(tf.transpose(w))
    dlt = tf.constant(tf.transpose(dl))
    return {
        "fwd [N,V] x@W+b": lambda: tf.nn.bias_add(tf.matmul(x, w), b),
        "fwd [N,V] x@W": lambda: tf.matmul(x, w),
        "fwd [N,V] x@(W^T stored)^T": lambda: tf.matmul(x, wt, transpose_b=True),
        "fwd [V,N] W^T@x^T": lambda: tf.matmul(w, x, transpose_a=True, transpose_b=True),
        "fwd [V,N] then transposed": lambda: tf.transpose(
            tf.matmul(w, x, transpose_a=True, transpose_b=True)),
        "fwd [N,V] two row halves, concat": lambda: tf.concat(
            [tf.matmul(p, w) for p in tf.split(x, 2, 0)], 0),
        "fwd [N,V] two row halves, kept apart": lambda: [tf.matmul(p, w) for p in tf.split(x, 2, 0)],
        "dW [H,V] x^T@dl": lambda: tf.matmul(x, dl, transpose_a=True),
        "dW^T [V,H] dl^T@x": lambda: tf.matmul(dl, x, transpose_a=True),
        "dW [H,V] (dl^T@x)^T": lambda: tf.transpose(tf.matmul(dl, x, transpose_a=True)),
        "dx [N,H] dl@W^T": lambda: tf.matmul(dl, w, transpose_b=True),
        "transpose [N,V]": lambda: tf.transpose(dl),
        "softmax rows of [N,V]": lambda: tf.nn.softmax(dl),
        "softmax columns of [V,N]": lambda: tf.nn.softmax(dlt, axis=0),
        "logsumexp rows of [N,V]": lambda: tf.reduce_logsumexp(dl, axis=1),
        "logsumexp columns of [V,N]": lambda: tf.reduce_logsumexp(dlt, axis=0),
    }


def pieces(_):
    x, w, b, _ = tensors(64 * K)
    score = tf.constant(rng.standard_normal((64 * K, 1)), tf.float32)

    def candidates(rows):
        p = tf.nn.softmax(tf.nn.bias_add(tf.matmul(rows, w), b))
        s = tf.math.log(p) + score[:tf.shape(rows)[0]]
        return tf.math.top_k(tf.reshape(s, [-1, K * V]), 2 * K)

    def split(k):
        def f():
            out = [candidates(p) for p in tf.split(x, k, 0)]
            return tf.concat([o.values for o in out], 0), tf.concat([o.indices for o in out], 0)
        return f

    return {"candidates, one piece": lambda: candidates(x),
            **{f"candidates, {k} row pieces": split(k) for k in (2, 4, 8)}}


def xla(n):
    x, w, b, dl = tensors(n)
    fwd = tf.function(lambda x, w, b: tf.nn.bias_add(tf.matmul(x, w), b), jit_compile=True)
    dw = tf.function(lambda x, dl: tf.matmul(x, dl, transpose_a=True), jit_compile=True)
    dx = tf.function(lambda dl, w: tf.matmul(dl, w, transpose_b=True), jit_compile=True)
    return {"fwd oneDNN": lambda: tf.nn.bias_add(tf.matmul(x, w), b),
            "fwd XLA": lambda: fwd(x, w, b),
            "dW oneDNN": lambda: tf.matmul(x, dl, transpose_a=True),
            "dW XLA": lambda: dw(x, dl),
            "dx oneDNN": lambda: tf.matmul(dl, w, transpose_b=True),
            "dx XLA": lambda: dx(dl, w)}


def loss(n):
    x, w, b, _ = tensors(n)
    target = tf.constant(rng.integers(0, V, n), tf.int32)

    @tf.custom_gradient
    def columns(x, kernel, bias, target):
        lt = tf.matmul(kernel, x, transpose_a=True, transpose_b=True) + bias[:, None]  # [V, N]
        top = tf.reduce_max(lt, axis=0)
        exp = tf.exp(lt - top)
        total = tf.reduce_sum(exp, axis=0)
        at = tf.stack([target, tf.range(tf.shape(target)[0])], 1)
        out = tf.gather_nd(lt, at) - (tf.math.log(total) + top)

        def grad(g):
            dlt = tf.tensor_scatter_nd_add(exp * (-g / total)[None, :], at, g)
            return (tf.matmul(dlt, kernel, transpose_a=True, transpose_b=True),
                    tf.transpose(tf.matmul(dlt, x)), tf.reduce_sum(dlt, 1), None)
        return out, grad

    def run(form):
        def f():
            with tf.GradientTape() as tape:
                tape.watch(x)
                lp = form()
                total = tf.reduce_sum(lp * 0.01)
            return [total, *tape.gradient(total, [x, w, b])]
        return f

    return {"[N,V]: product + log_softmax_at": run(
                lambda: log_softmax_at(tf.nn.bias_add(tf.matmul(x, w), b), target)),
            "[V,N]: one custom gradient": run(lambda: columns(x, w, b, target))}


def main():
    kind = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 64 * K
    forms = {k: tf.function(f) for k, f in {"layouts": layouts, "pieces": pieces, "xla": xla,
                                            "loss": loss}[kind](n).items()}
    first = {k: [t.numpy() for t in tf.nest.flatten(f())] for k, f in forms.items()}
    if kind == "loss":
        a, c = first.values()
        print("largest difference of the two forms' loss and gradients:",
              [float(np.max(np.abs(p - q))) for p, q in zip(a, c)])
    wall = {k: [] for k in forms}
    cpu = {k: [] for k in forms}
    for _ in range(9):
        for k, f in forms.items():
            t, c = time.perf_counter(), time.process_time()
            for _ in range(20):
                out = f()
            tf.nest.flatten(out)[0].numpy()
            wall[k].append((time.perf_counter() - t) / 20 * 1e3)
            cpu[k].append((time.process_time() - c) / 20 * 1e3)
    gflop = 2 * n * H * V / 1e9
    for k in forms:
        w_ms = float(np.median(wall[k]))
        print(f"{kind} N={n} {k:42s} {w_ms:7.2f} ms  cpu {np.median(cpu[k]):7.2f} ms  "
              f"{gflop / w_ms * 1e3:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
