"""The tensors decoding holds at its peak, by TensorFlow's own count: the oneDNN CPU
allocator's in-use bytes (tf.config.experimental.get_memory_info("CPU:0"), current and peak,
MiB) and the process' RSS after the model's build, its restore, a batch of 64 validation
articles and ten more batches (reference_onmt's decode section, beam 4, forced to 30 tokens).

    python decode_memory_peak.py MODEL_DIR DATA
"""
import dataclasses
import sys

import tensorflow as tf
from decode_memory_knobs import rss  # this folder's (run from here, or as a path)

from pgn_tf.data import dataset
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import decode_split
from pgn_tf.inference.loading import decode_config
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.model_dir import ModelDir, restore_model
from pgn_tf.models import build_model


def held() -> dict:
    info = tf.config.experimental.get_memory_info("CPU:0")
    return {k: round(v / 2**20, 1) for k, v in info.items()}


examples = dataset.read_split(sys.argv[2], None, None)
model_dir = ModelDir(sys.argv[1])
cfg = model_dir.read_config()
vocab = model_dir.read_vocab(cfg)
model = build_model(cfg.model, vocab.size)
print("built", rss(), held())
restore_model(model, model_dir.find_checkpoint("latest", cfg))
print("restored", rss(), held())
cfg = decode_config(cfg, sys.argv[1], (), "decoding")
cfg = dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, batch_size=64)).validate()
summarizer = Summarizer(model, vocab, cfg)
request = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
for name, n in (("a batch of 64", 64), ("640 more", 640)):
    tf.config.experimental.reset_memory_stats("CPU:0")
    decode_split(summarizer, examples[:n], batch_size=64, request=request)
    print(name, rss(), held())
