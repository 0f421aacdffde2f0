"""A GPU user's first check: which device trains, whether the recurrences took cuDNN's path,
which precision was chosen, and how fast a training step and beam decoding are, for the speed
comparison's and the papers' configs.

    pip install -e ".[gpu]"          # TensorFlow's CUDA libraries (tensorflow[and-cuda])
    python -m benchmarks.gpu_check [--data train.jsonl.gz] [--configs reference_onmt,...] \
        [--steps 20] [--warmup 5] [--decode_articles 64] [--decode_length 100]

For each config (`model.rnn_impl=auto`, `train.mixed_precision=auto`, as a user runs them) it
trains --warmup + --steps steps of a fresh model (benchmarks.train_throughput.measure), reads
the ops of the traced training step (its functions included): CudnnRNN* ops there mean the LSTMs
run as cuDNN kernels; then decodes --decode_articles articles with beam 4, every summary forced to
--decode_length tokens (equal work for any model). Without a GPU it runs on the CPU and says so
(the fused recurrences, bfloat16 where the CPU multiplies it natively). Without --data the
bundled synthetic corpus is used: its vocabulary is a few hundred words, so the output layer is
far smaller than a real corpus' 50k. Prints the figures with the CPU's vector flags and a JSON
line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import tensorflow as tf

from benchmarks.common import cpu_flags, emit
from benchmarks.train_throughput import measure
from pgn_tf import config as config_lib
from pgn_tf.data import dataset, synthetic
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.training import distribute
from pgn_tf.training.trainer import Trainer

DEFAULT_CONFIGS = ("reference_onmt", "see2017_coverage", "paulus2017")


def device_report() -> dict:
    """The GPUs TensorFlow sees (name, compute capability) and the CUDA / cuDNN it was built
    with."""
    build = tf.sysconfig.get_build_info()
    gpus = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        gpus.append({"name": details.get("device_name", gpu.name),
                     "compute_capability": details.get("compute_capability")})
    return {"gpus": gpus, "device": "GPU" if gpus else "CPU",
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda_version": build.get("cuda_version"), "cudnn_version": build.get("cudnn_version")}


def graph_op_types(concrete) -> set[str]:
    """Every op type of a concrete function's graph, the functions it calls included."""
    graph_def = concrete.graph.as_graph_def()
    ops = {n.op for n in graph_def.node}
    for fn in graph_def.library.function:
        ops.update(n.op for n in fn.node_def)
    return ops


def cudnn_ops(trainer: Trainer) -> list[str]:
    """The CudnnRNN* op types in the trainer's traced training step (empty: no cuDNN)."""
    step = trainer._train_step  # traced by measure()
    return sorted(op for op in graph_op_types(step.get_concrete_function()) if "Cudnn" in op)


def decode_speed(trainer: Trainer, cfg: config_lib.Config, articles: list[str], length: int,
                 beam: int = 4) -> dict:
    """Articles/s of beam search with every summary forced to `length` tokens."""
    summarizer = Summarizer(trainer.model, trainer.vocab, cfg)
    batch = cfg.decode.batch_size

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def run(x):
        return summarizer.summarize(x, DecodeRequest(beam, length, length))["length"]

    run(tf.constant(articles[:batch]))  # tracing
    t0 = time.perf_counter()
    tokens = 0
    for i in range(0, len(articles), batch):
        tokens += int(tf.reduce_sum(run(tf.constant(articles[i:i + batch]))))
    seconds = time.perf_counter() - t0
    return {"decode_articles_per_sec": round(len(articles) / seconds, 2),
            "decode_tokens_per_sec": round(tokens / seconds, 1), "decode_beam": beam,
            "decode_length": length, "decode_batch": batch}


def check_config(name: str, files: list[str], steps: int, warmup: int, articles: list[str],
                 length: int, strategy) -> dict:
    cfg = config_lib.resolve(name, ["model.rnn_impl=auto", "train.mixed_precision=auto"])
    work = tempfile.mkdtemp(prefix=f"gpu_check-{name}-")
    result = measure(cfg, files, steps, warmup, strategy, work_dir=work, keep_trainer=True)
    trainer = result.pop("trainer")
    cudnn = cudnn_ops(trainer)
    out = {"config": name, "rnn_impl": result["rnn_impl"], "precision": result["precision"],
           "cudnn_ops_in_train_step": cudnn, "cudnn": bool(cudnn),
           "sec_per_step": result["sec_per_step"],
           "median_sec_per_step": result["median_sec_per_step"],
           "src_tokens_per_sec": result["src_tokens_per_sec"], "batch_size": result["batch_size"],
           "vocab": result["vocab"], "params": result["params"]}
    out.update(decode_speed(trainer, cfg, articles, length))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data", help="training data (any pgn_tf format); default: synthetic corpus")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--decode_articles", type=int, default=64)
    p.add_argument("--decode_length", type=int, default=100)
    a = p.parse_args(argv)
    strategy = distribute.make_strategy("mirrored")
    devices = device_report()
    print(f"device: {devices['device']} {devices['gpus'] or ''} (TensorFlow built with CUDA "
          f"{devices['cuda_version'] or '-'}, cuDNN {devices['cudnn_version'] or '-'}); CPU "
          f"flags: {cpu_flags()}", flush=True)
    if devices["device"] == "CPU":
        print("no GPU visible: this runs on the CPU (fused recurrences, no cuDNN); on a GPU "
              "machine install the CUDA libraries with pip install -e \".[gpu]\"", flush=True)
    work = tempfile.mkdtemp(prefix="gpu_check-data-")
    if a.data:
        files = dataset.resolve_files(a.data, os.path.join(work, "data"))
    else:
        files = sorted(tf.io.gfile.glob(synthetic.write_corpus(os.path.join(work, "syn"),
                                                               seed=0)["train"]))
    articles = [e.article for e in synthetic.generate(a.decode_articles, seed=7)]
    rows = []
    for name in a.configs.split(","):
        row = check_config(name, files, a.steps, a.warmup, articles, a.decode_length, strategy)
        print(f"{name}: {row}", flush=True)
        rows.append(row)
    emit("gpu_check", {**devices, "configs": rows, "data": a.data or "synthetic"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
