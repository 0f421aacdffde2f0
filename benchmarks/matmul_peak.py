"""This machine's matmul peak: GFLOP/s of tf.matmul in float32 (and bfloat16), so the training
throughput can be reported as a fraction of what the hardware reaches with TF.

    python -m benchmarks.matmul_peak [--sizes 1024 2048 4096] [--seconds 3]

Each size runs square [n, n] x [n, n] matmuls inside one tf.function for about --seconds after a
warm-up; the best size is the peak. bfloat16 is measured where the CPU reports AVX512_BF16 or
AMX (or on a GPU).
"""

from __future__ import annotations

import argparse
import time

import tensorflow as tf

from benchmarks.common import emit
from pgn_tf.training import hardware


def gflops(n: int, dtype: tf.DType, seconds: float, repeats: int = 8) -> float:
    a = tf.cast(tf.random.normal([n, n]), dtype)
    b = tf.cast(tf.random.normal([n, n], stddev=n**-0.5), dtype)  # keeps x @ b at unit scale

    @tf.function
    def run(a, b):
        # A chain, so no two matmuls are alike: Grappler would merge identical ones (CSE).
        x = a
        for _ in range(repeats):
            x = tf.matmul(x, b)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    run(a, b).numpy()  # trace + warm-up
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        run(a, b).numpy()
        calls += 1
    elapsed = time.perf_counter() - t0
    return 2.0 * n**3 * repeats * calls / elapsed / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    flags = hardware.cpu_flags() or frozenset()
    gpu = bool(tf.config.list_physical_devices("GPU"))
    dtypes = [tf.float32]
    if gpu or flags & {"avx512_bf16", "amx_bf16"}:
        dtypes.append(tf.bfloat16)
    for dtype in dtypes:
        results = {n: round(gflops(n, dtype, a.seconds), 1) for n in a.sizes}
        best = max(results, key=results.get)
        emit("matmul_peak", {"dtype": dtype.name, "device": "GPU" if gpu else "CPU",
                             "gflops_by_size": {str(k): v for k, v in results.items()},
                             "peak_gflops": results[best], "peak_size": best,
                             "threads_intra_op": tf.config.threading.get_intra_op_parallelism_threads()})


if __name__ == "__main__":
    main()
