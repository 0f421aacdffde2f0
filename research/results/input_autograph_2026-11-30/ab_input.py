"""Interleaved before/after costs of a training start, each a fresh process in its checkout,
ABBA order: the vocabulary counted and the first training batch read (build_vocab,
make_dataset: tf.data traces its functions), then ten training steps of a tiny model from
nothing. Prints each run's seconds and its training losses (the same data, so the same losses).

    python ab_input.py BEFORE_CHECKOUT AFTER_CHECKOUT CORPUS_DIR OUT_DIR [ROUNDS]

CORPUS_DIR: a synthetic corpus (pgn_tf.data.synthetic.write_corpus).
"""

import importlib.util
import os
import sys

# ../tracing_autograph_2026-11-29/ab_tracing.py's ABBA rounds, and the fresh-process runner
# of ../decode_memory_2026-11-29/ab_decode.py it loads, given this CHILD.
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "ab_tracing", os.path.join(HERE, "..", "tracing_autograph_2026-11-29", "ab_tracing.py"))
ab_tracing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_tracing)

CHILD = r'''
import glob, json, os, sys, time
from pgn_tf.utils import onednn
onednn.start()
import tensorflow as tf
import pgn_tf
from pgn_tf import config
from pgn_tf.data import dataset
from pgn_tf.training.run import train
_, corpus, out = sys.argv[1:4]
files = sorted(glob.glob(os.path.join(corpus, "train*")))
cfg = config.preset("tiny")
times = {}
t = time.perf_counter()
voc = dataset.build_vocab(files, cfg.data, verbose=0)
next(iter(dataset.make_dataset(files, voc, cfg.data, 32, True, training=True, seed=0)))
times["vocab_and_first_batch_s"] = round(time.perf_counter() - t, 2)
t = time.perf_counter()
res = train(os.path.join(out, "train"), "tiny", ["train.max_steps=10", "train.eval_every=10",
            "train.eval_samples=2", "train.log_every=5"],
            train_data=os.path.join(corpus, "train*"),
            eval_data=os.path.join(corpus, "validation*"), progress=False)
times["train_10_steps_s"] = round(time.perf_counter() - t, 2)
print("RESULT " + json.dumps({"pgn_tf": pgn_tf.__file__, **times, "loss": res.metrics["loss"],
                              "eval_loss": res.metrics["eval_loss"]}))
'''


def main():
    before, after, corpus, out_dir = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    for _ in ab_tracing.abba(before, after, out_dir, n, lambda checkout, out:
                             ab_tracing.ab_decode.run(checkout, "-", corpus, out, child=CHILD)):
        pass


if __name__ == "__main__":
    main()
