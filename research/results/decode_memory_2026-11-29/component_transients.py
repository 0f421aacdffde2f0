"""TensorFlow's allocator count of the transient bytes (peak minus what was held before) of the
parts of one compiled beam-search call, on the 64 longest validation descriptions (L = 100),
beam 4, by a reference_onmt model: the encoding for the search (search_inputs), one decoder
step of the search, and the whole compiled call (forced to 30 tokens). Run from a checkout:

    PYTHONPATH=CHECKOUT python component_transients.py MODEL_DIR VALIDATION_JSONL_GZ
"""
import sys

from pgn_tf.utils import onednn

onednn.start()
import tensorflow as tf  # noqa: E402

from pgn_tf.data import dataset  # noqa: E402
from pgn_tf.inference.api import DecodeRequest  # noqa: E402
from pgn_tf.inference.summarizer import Summarizer  # noqa: E402

model_dir, data = sys.argv[1:3]
ex = sorted(dataset.read_split(data, None, None), key=lambda e: -len(e.article.split()))[:64]
s = Summarizer.from_model_dir(model_dir, "latest")
arts = tf.constant([e.article for e in ex])
feats = s.encode_text(arts)
state, step_fn = s.search_inputs(feats, 4, mixture=True)
ids = tf.zeros([256], tf.int32) + 5


def transient(fn, *a):
    fn(*a)
    tf.config.experimental.reset_memory_stats("CPU:0")
    held = tf.config.experimental.get_memory_info("CPU:0")["current"]
    fn(*a)
    return round((tf.config.experimental.get_memory_info("CPU:0")["peak"] - held) / 2**20, 1)


print("source length", feats["enc_ids"].shape[1])
print("search_inputs (the encoder) MiB",
      transient(tf.function(lambda: s.search_inputs(feats, 4, mixture=True)[0])))
print("one search step MiB",
      transient(tf.function(lambda i, st: step_fn(i, tf.constant(3), st)), ids, state))
req = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
print("whole compiled call MiB", transient(lambda: s.compiled(arts, req)))
