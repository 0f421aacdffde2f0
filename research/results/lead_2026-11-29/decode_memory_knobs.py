"""Decoding's memory against the allocators' knobs: the process' RSS (MiB) after the model's
build, its restore, and decoding batches of 1, 2, 8, 64 and 64 validation articles in turn
(each new batch size a new trace of the search: reference_onmt's decode section, beam 4,
forced to 30 tokens, in batches of up to 64). Run under each environment to compare, e.g.

    python decode_memory_knobs.py MODEL_DIR DATA
    TF_ENABLE_ONEDNN_OPTS=0 python decode_memory_knobs.py MODEL_DIR DATA
"""
import dataclasses
import gc
import sys


def rss() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


import tensorflow as tf  # noqa: E402

from pgn_tf.data import dataset  # noqa: E402
from pgn_tf.decoding.search import DecodeRequest  # noqa: E402
from pgn_tf.inference.evaluator import decode_split  # noqa: E402
from pgn_tf.inference.loading import decode_config  # noqa: E402
from pgn_tf.inference.summarizer import Summarizer  # noqa: E402
from pgn_tf.model_dir import ModelDir, restore_model  # noqa: E402
from pgn_tf.models import build_model  # noqa: E402


def main() -> None:
    examples = dataset.read_split(sys.argv[2], None, None)
    model_dir = ModelDir(sys.argv[1])
    cfg = model_dir.read_config()
    vocab = model_dir.read_vocab(cfg)
    print("after import and data", rss())
    model = build_model(cfg.model, vocab.size)
    weights = sum(int(tf.size(v)) for v in model.weights) * 4 / 2**20
    print("model built", rss(), f"({weights:.1f} MiB of weights)")
    restore_model(model, model_dir.find_checkpoint("latest", cfg))
    print("restored", rss())
    cfg = decode_config(cfg, sys.argv[1], (), "decoding")
    cfg = dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, batch_size=64)).validate()
    summarizer = Summarizer(model, vocab, cfg)
    request = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
    for n in (1, 2, 8, 64, 64):
        decode_split(summarizer, examples[:n], batch_size=64, request=request)
        gc.collect()
        print("decoded a batch of", n, rss())


if __name__ == "__main__":
    main()
