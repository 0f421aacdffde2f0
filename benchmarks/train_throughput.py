"""Training throughput: steady-state steps/s, source tokens/s, examples/s and GFLOP/s of the
training step (pgn_tf.training.trainer's Trainer, the same tf.function and strategy), warm-up
excluded.

    python -m benchmarks.train_throughput --config reference_onmt --data train.jsonl.gz \
        [--steps 60] [--warmup 10] [--set train.mixed_precision=auto] [--profile DIR]

Source tokens are real article tokens (sum of enc_len: padding is not counted), as OpenNMT-py
counts them. FLOPs are counted analytically on real tokens too (`step_flops`): forward =
2*m*n*k of every dense/LSTM/attention product for the tokens of each example (its article
length, its summary length), training = 3x forward (backward costs two forward passes); the
padded-shape count is printed beside it. Compare with benchmarks/matmul_peak.py.

Every step waits for its result (as pgn_tf.training.loop does, which reads the loss each step),
so the
per-step times are exact: the median and the fastest are printed beside the mean, because
these machines are shared and the mean moves with other load; the process CPU time per step is
printed too. `--profile DIR` traces 5 steps after the timed ones with tf.profiler
(TensorBoard's profile tab) and prints the op types and the scopes (the ops' names' first
four parts) that took the most time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from benchmarks.common import add_cpu_flag, emit, emulate_cpu, refuse_emulated_bf16, top_ops
from pgn_tf import config as config_lib
from pgn_tf.data import dataset, synthetic
from pgn_tf.model_dir import ModelDir
from pgn_tf.training import distribute
from pgn_tf.training.trainer import Trainer


def forward_flops(m: config_lib.ModelConfig, vocab: int, src_tokens: float, tgt_tokens: float,
                  tgt_x_src: float, batch: int) -> float:
    """Matmul FLOPs of one teacher-forced forward pass of the See et al. model.

    src_tokens: article tokens in the batch (sum of L_i); tgt_tokens: decoder steps (sum of
    T_i); tgt_x_src: sum of T_i * L_i (attention work: every step scores the whole article);
    batch: examples. Real lengths count real work; B * L_max etc. count the padded shapes."""
    H, E = m.hidden_dim, m.emb_dim
    He = m.enc_hidden_dim or H  # units per encoder direction
    D = 2 * He  # encoder outputs, context, attention score space
    per_src = 2 * (2 * (E + He) * 4 * He)  # BiLSTM: 2 directions, 4 gates
    per_src += 2 * D * D  # W_h h_i, once per article
    per_batch = 2 * 2 * (D * H)  # state reduction (h and c)
    per_tgt = (
        2 * (E + D) * E  # input feeding projection
        + 2 * (E + H) * 4 * H  # decoder LSTM
        + 2 * (2 * H) * D  # W_s s_t
        + 2 * (H + D) * H  # output projection [h; h*]
        + 2 * H * vocab  # vocabulary projection
    )
    per_tgt_src = 2 * D + 2 * D  # v^T tanh(.) score and context vector, per article token
    if m.pointer_gen:
        per_tgt += 2 * (D + 2 * H + E)  # p_gen
        per_tgt_src += 2  # copy mass of the target word
    if m.coverage:
        per_tgt_src += 2 * D  # w_c c_i in every score
    return per_src * src_tokens + per_batch * batch + per_tgt * tgt_tokens + per_tgt_src * tgt_x_src


def batch_flops(cfg: config_lib.Config, vocab: int, batch: dict) -> tuple[float, float]:
    """(training FLOPs on real tokens, on the padded shapes) of one batch."""
    enc = np.concatenate([np.asarray(x) for x in _local(batch["enc_len"])]).astype(float)
    dec = np.concatenate([np.asarray(x) for x in _local(batch["dec_len"])]).astype(float)
    b = len(enc)
    length = max(int(x.shape[1]) for x in _local(batch["enc_ids"]))
    steps = max(int(x.shape[1]) for x in _local(batch["dec_input"]))
    real = forward_flops(cfg.model, vocab, enc.sum(), dec.sum(), float(enc @ dec), b)
    padded = forward_flops(cfg.model, vocab, b * length, b * steps, b * steps * length, b)
    return 3 * real, 3 * padded


def _local(value) -> list:
    """The per-replica parts of a (possibly distributed) batch value."""
    return list(getattr(value, "values", (value,)))


def measure(cfg: config_lib.Config, files: list[str], steps: int, warmup: int,
            strategy: tf.distribute.Strategy | None = None, profile: str | None = None,
            work_dir: str | None = None, keep_trainer: bool = False) -> dict:
    """Trains `warmup` + `steps` steps of a fresh model on files; the figures of the timed
    steps (module docstring), and the Trainer under "trainer" with keep_trainer."""
    strategy = strategy or tf.distribute.get_strategy()
    work = work_dir or tempfile.mkdtemp(prefix="train_bench-")
    vocab = dataset.build_vocab(files, cfg.data)
    trainer = Trainer(cfg, ModelDir(work), vocab, files, None, strategy)
    it = iter(trainer.train_ds)
    t0 = time.perf_counter()
    for _ in range(warmup):
        trainer.train_step(next(it))["loss"].numpy()
    warmup_s = time.perf_counter() - t0
    flops = padded_flops = src_tokens = 0.0
    examples, times = 0, []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        s0 = time.perf_counter()
        batch = next(it)
        report = trainer.train_step(batch)
        report["loss"].numpy()
        times.append(time.perf_counter() - s0)
        real, padded = batch_flops(cfg, vocab.size, batch)
        flops, padded_flops = flops + real, padded_flops + padded
        src_tokens += float(report["src_tokens"])
        examples += sum(int(x.shape[0]) for x in _local(batch["enc_len"]))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    result = {
        "replicas": strategy.num_replicas_in_sync, "batch_size": cfg.train.batch_size,
        "vocab": vocab.size, "hidden_dim": cfg.model.hidden_dim,
        "enc_hidden_dim": cfg.model.enc_hidden_dim or cfg.model.hidden_dim,
        "emb_dim": cfg.model.emb_dim, "pointer_gen": cfg.model.pointer_gen,
        "coverage": cfg.model.coverage, "precision": trainer.precision,
        "rnn_impl": trainer.model.rnn_impl,
        "jit_compile": cfg.train.jit_compile,
        # the bucket grid, which presets have changed (a preset's name alone does not say it)
        "buckets": ([len(b) for b in dataset.length_buckets(cfg.data)]
                    if dataset.bucketed(cfg.data) else [1, 1]),
        "steps": steps, "warmup_steps": warmup,
        "warmup_seconds": round(warmup_s, 1), "seconds": round(seconds, 2),
        "sec_per_step": round(seconds / steps, 4),
        "median_sec_per_step": round(float(np.median(times)), 4),
        "min_sec_per_step": round(float(np.min(times)), 4),
        "cpu_sec_per_step": round(cpu / steps, 4),
        "src_tokens_per_sec": round(src_tokens / seconds, 1),
        "examples_per_sec": round(examples / seconds, 1),
        "src_tokens_per_step": round(src_tokens / steps, 1),
        "gflop_per_step_real_tokens": round(flops / steps / 1e9, 3),
        "gflop_per_step_padded": round(padded_flops / steps / 1e9, 3),
        "achieved_gflops_real_tokens": round(flops / seconds / 1e9, 2),
        "params": int(sum(np.prod(v.shape) for v in trainer.model.trainable_variables)),
        "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                    tf.config.threading.get_inter_op_parallelism_threads()],
    }
    if profile:
        tf.profiler.experimental.start(profile)
        for _ in range(5):
            trainer.train_step(next(it))["loss"].numpy()
        tf.profiler.experimental.stop()
        result["top_ops_pct"] = top_ops(profile)
        result["top_scopes_pct"] = top_ops(profile, 12, scope_depth=4)
    if keep_trainer:
        result["trainer"] = trainer
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--data", help="training data (any pgn_tf format); default: synthetic corpus")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--cpu_devices", type=int, default=1)
    add_cpu_flag(p)
    p.add_argument("--profile", metavar="DIR", help="tf.profiler trace of 5 more steps")
    a = p.parse_args()
    emulate_cpu(a.cpu, "benchmarks.train_throughput", sys.argv[1:])
    if a.cpu_devices > 1:
        distribute.set_cpu_devices(a.cpu_devices)
    strategy = distribute.make_strategy("mirrored")
    cfg = config_lib.resolve(a.config, a.set)
    refuse_emulated_bf16(a.cpu, cfg.train.mixed_precision, "--config/--set")
    work = tempfile.mkdtemp(prefix="train_bench-")
    if a.data:
        files = dataset.resolve_files(a.data, os.path.join(work, "data"))
    else:
        files = synthetic.write_corpus(os.path.join(work, "syn"), seed=0)["train"]
        files = sorted(tf.io.gfile.glob(files))
    result = measure(cfg, files, a.steps, a.warmup, strategy, a.profile, work)
    emit("train_throughput", {"config": a.config, "overrides": a.set, **result})


if __name__ == "__main__":
    main()
