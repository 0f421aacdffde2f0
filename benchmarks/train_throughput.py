"""Training throughput: steady-state steps/s, source tokens/s, examples/s and GFLOP/s of the
training step (pgn_tf.trainer's Trainer, the same tf.function and strategy), warm-up excluded.

    python benchmarks/train_throughput.py --config see2017_coverage --data train.jsonl.gz \
        --set data.vocab_size=20000 --set data.max_enc_steps=100 --set train.batch_size=32 \
        [--steps 60] [--warmup 10] [--cpu_devices N]

Source tokens are real article tokens (the sum of enc_len: padding is not counted), as
OpenNMT-py counts them. FLOPs are counted analytically from the model's matmuls
(`forward_flops`): forward = 2*m*n*k for every dense/LSTM/attention product over the real padded
batch shapes, training = 3x forward (backward costs two forward passes). Compare with
benchmarks/matmul_peak.py. `measure` is the measurement itself, for other benchmarks
(compare_peer.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import emit  # noqa: E402
from pgn_tf import config as config_lib  # noqa: E402
from pgn_tf import train  # noqa: E402
from pgn_tf.data import dataset, synthetic  # noqa: E402
from pgn_tf.model_dir import ModelDir  # noqa: E402
from pgn_tf.trainer import Trainer  # noqa: E402


def forward_flops(m: config_lib.ModelConfig, vocab: int, batch: int, src: int, tgt: int) -> float:
    """Matmul FLOPs of one teacher-forced forward pass of the See et al. model.

    batch B, src = padded article length L, tgt = decoder steps T."""
    H, E = m.hidden_dim, m.emb_dim
    enc = 2 * (2 * (E + H) * 4 * H) * batch * src  # BiLSTM: 2 directions, 4 gates
    enc += 2 * (2 * H) * (2 * H) * batch * src  # W_h h_i, once per article
    enc += 2 * 2 * (2 * H * H) * batch  # state reduction (h and c)
    per_step = (
        2 * (E + 2 * H) * E  # input feeding projection
        + 2 * (E + H) * 4 * H  # decoder LSTM
        + 2 * (2 * H) * (2 * H)  # W_s s_t
        + 2 * (2 * H) * src  # v^T tanh(.) over the article
        + 2 * src * (2 * H)  # context vector
        + 2 * (3 * H) * H  # output projection [h; h*]
        + 2 * H * vocab  # vocabulary projection
    )
    if m.pointer_gen:
        per_step += 2 * (4 * H + E) + 2 * src  # p_gen, copy mass of the target word
    if m.coverage:
        per_step += 2 * (2 * H) * src  # w_c c_i in every score
    return enc + per_step * batch * tgt


def measure(cfg: config_lib.Config, files: list[str], steps: int, warmup: int,
            strategy: tf.distribute.Strategy | None = None, work_dir: str | None = None) -> dict:
    """Trains `warmup` + `steps` steps of a fresh model on `files` (TFRecords); the figures of
    the timed steps (module docstring). work_dir: where the Trainer keeps its (unused) model
    dir, a new temporary directory by default; it must hold no checkpoint."""
    strategy = strategy or tf.distribute.get_strategy()
    work = work_dir or tempfile.mkdtemp(prefix="train_bench-")
    vocab = dataset.build_vocab(files, cfg.data)
    trainer = Trainer(cfg, ModelDir(work), vocab, files, None, strategy)
    it = iter(trainer.train_ds)

    def shapes(batch):
        local = trainer.strategy.experimental_local_results(batch["enc_ids"])
        dec = trainer.strategy.experimental_local_results(batch["dec_input"])
        return sum(int(x.shape[0]) for x in local), int(local[0].shape[1]), int(dec[0].shape[1])

    for _ in range(warmup):
        trainer.train_step(next(it))["loss"].numpy()
    flops, src_tokens, examples = 0.0, 0.0, 0
    t0 = time.perf_counter()
    for _ in range(steps):
        batch = next(it)
        report = trainer.train_step(batch)
        b, length, dec_steps = shapes(batch)
        flops += 3 * forward_flops(cfg.model, vocab.size, b, length, dec_steps)
        src_tokens += float(report["src_tokens"])
        examples += b
    report["loss"].numpy()
    seconds = time.perf_counter() - t0
    return {
        "replicas": trainer.strategy.num_replicas_in_sync,
        "batch_size": cfg.train.batch_size, "vocab": vocab.size,
        "hidden_dim": cfg.model.hidden_dim, "emb_dim": cfg.model.emb_dim,
        "pointer_gen": cfg.model.pointer_gen, "coverage": cfg.model.coverage,
        "steps": steps, "warmup_steps": warmup, "seconds": round(seconds, 2),
        "steps_per_sec": round(steps / seconds, 3), "sec_per_step": round(seconds / steps, 4),
        "src_tokens_per_sec": round(src_tokens / seconds, 1),
        "examples_per_sec": round(examples / seconds, 1),
        "gflop_per_step": round(flops / steps / 1e9, 3),
        "achieved_gflops": round(flops / seconds / 1e9, 2),
        "params": int(np.sum([np.prod(v.shape) for v in trainer.model.trainable_variables])),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--data", help="training data (any pgn_tf format); default: synthetic corpus")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--cpu_devices", type=int, default=1)
    a = p.parse_args()
    if a.cpu_devices > 1:
        train.set_cpu_devices(a.cpu_devices)
    strategy = train.make_strategy("mirrored")
    cfg = config_lib.resolve(a.config, a.set)
    work = tempfile.mkdtemp(prefix="train_bench-")
    if a.data:
        files = dataset.resolve_files(a.data, os.path.join(work, "data"))
    else:
        files = synthetic.write_corpus(os.path.join(work, "syn"), seed=0)["train"]
        files = sorted(tf.io.gfile.glob(files))
    result = measure(cfg, files, a.steps, a.warmup, strategy, work)
    emit("train_throughput", {"config": a.config, "overrides": a.set, **result})


if __name__ == "__main__":
    main()
