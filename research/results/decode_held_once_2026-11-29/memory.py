"""Decoding's memory with the checkout on PYTHONPATH: the process' RSS and TensorFlow's own
count of the tensors it holds (tf.config.experimental.get_memory_info("CPU:0"), in use and
peak, MiB) after the model's restore, a batch of 64 articles of DATA and N more (batches of
64, beam 4, every summary forced to STEPS tokens), and the process' peak RSS (VmHWM).

    PYTHONPATH=CHECKOUT python memory.py MODEL_DIR DATA STEPS N
"""
import dataclasses
import sys

import tensorflow as tf

import pgn_tf
from pgn_tf.data import dataset
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import decode_split
from pgn_tf.inference.summarizer import Summarizer


def status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def held() -> dict:
    info = tf.config.experimental.get_memory_info("CPU:0")
    return {k: round(v / 2**20, 1) for k, v in info.items()}


model_dir, data, steps, more = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
print("pgn_tf from", pgn_tf.__file__)
examples = dataset.read_split(data, None, None)
loaded = Summarizer.from_model_dir(model_dir, "latest")
cfg = loaded.cfg
summarizer = Summarizer(loaded.model, loaded.vocab, dataclasses.replace(
    cfg, decode=dataclasses.replace(cfg.decode, batch_size=64)).validate())
print("restored", status("VmRSS"), held())
request = DecodeRequest(beam_size=4, max_steps=steps, min_steps=steps)
for name, n in (("a batch of 64", 64), (f"{more} more", more)):
    tf.config.experimental.reset_memory_stats("CPU:0")
    decode_split(summarizer, examples[:n], batch_size=64, request=request)
    print(name, status("VmRSS"), held())
print("peak RSS", status("VmHWM"))
