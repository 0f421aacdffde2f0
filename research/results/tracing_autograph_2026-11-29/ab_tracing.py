"""Interleaved before/after tracing costs, each a fresh process in its checkout, ABBA order:
an export of a trained model (its three signatures traced, written, reloaded and checked),
ten training steps of a tiny model from nothing (the step's and the evaluation's tracing
dominate), and a first summary from a model dir (the search traced once). Prints each run's
seconds and whether both sides' exports wrote the same summaries for the same articles.

    python ab_tracing.py BEFORE_CHECKOUT AFTER_CHECKOUT MODEL_DIR CORPUS_DIR OUT_DIR [ROUNDS]

MODEL_DIR: a trained model dir; CORPUS_DIR: a synthetic corpus (pgn_tf.data.synthetic).
"""

import importlib.util
import json
import os
import shutil
import sys

# The fresh-process runner of ../decode_memory_2026-11-29/ab_decode.py, given this CHILD.
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "ab_decode", os.path.join(HERE, "..", "decode_memory_2026-11-29", "ab_decode.py"))
ab_decode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_decode)

CHILD = r'''
import json, os, sys, time
from pgn_tf.utils import onednn
onednn.start()
import tensorflow as tf
import pgn_tf
from pgn_tf.data import tfrecord
from pgn_tf.saved_model import export
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.training.run import train
md, corpus, out = sys.argv[1:4]
articles = [e.article for e in tfrecord.read_tfrecords(os.path.join(corpus, "validation*"))]
times = {}
t = time.perf_counter()
path = export.export(md, os.path.join(out, "export"), "pgn", version=1)
times["export_s"] = round(time.perf_counter() - t, 2)
t = time.perf_counter()
train(os.path.join(out, "train"), "tiny", ["train.max_steps=10", "train.eval_every=10",
      "train.eval_samples=2"], train_data=os.path.join(corpus, "train*"),
      eval_data=os.path.join(corpus, "validation*"), progress=False)
times["train_10_steps_s"] = round(time.perf_counter() - t, 2)
t = time.perf_counter()
first = Summarizer.from_model_dir(md, "best").decode(articles[:8], 8)
times["first_summaries_s"] = round(time.perf_counter() - t, 2)
served = tf.saved_model.load(path).signatures["serving_default"]
summaries = [s.decode() for s in served(articles=tf.constant(articles))["summaries"].numpy()]
with open(os.path.join(out, "summaries.txt"), "w") as f:
    f.writelines(s + "\n" for s in summaries)
print("RESULT " + json.dumps({"pgn_tf": pgn_tf.__file__, **times}))
'''


def abba(before, after, out_dir, n, run):
    """Prints the CPU's flags, then n rounds of run(checkout, out) -> dict for each side, in
    ABBA order (before first in even rounds), out a fresh OUT_DIR/<side><round>; yields each
    round's index once both sides ran."""
    flags = sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags")
                    for f in line.split(":")[1].split()} & {"avx2", "avx512f", "avx512_bf16", "amx_tile"})
    print("cpu_flags:", " ".join(flags), flush=True)
    for r in range(n):
        order = [("before", before), ("after", after)]
        for side, checkout in (order if r % 2 == 0 else order[::-1]):
            out = os.path.join(out_dir, f"{side}{r}")
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            print(f"round {r + 1} {side}: {json.dumps(run(checkout, out))}", flush=True)
        yield r


def main():
    before, after, model_dir, corpus, out_dir = sys.argv[1:6]
    n = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    for r in abba(before, after, out_dir, n,
                  lambda checkout, out: ab_decode.run(checkout, model_dir, corpus, out,
                                                      child=CHILD)):
        same = (open(os.path.join(out_dir, f"before{r}", "summaries.txt")).read()
                == open(os.path.join(out_dir, f"after{r}", "summaries.txt")).read())
        print(f"round {r + 1}: the exports' summaries identical: {same}", flush=True)


if __name__ == "__main__":
    main()
