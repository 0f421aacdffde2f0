"""Where compare_peer's decoding child spends its memory: the process' RSS (VmRSS, VmHWM, and
the anonymous part) after each stage of the same decoding (reference_onmt's decode section,
beam 4, batch 64, forced to 30 tokens, every article of DATA), optionally with glibc's
malloc_trim(0) after the warm-up batch (TRIM=1) to show what is freed but held.

    python research/results/lead_2026-11-29/decode_memory_stages.py MODEL_DIR DATA
"""
import ctypes
import dataclasses
import os
import sys


def stage(name: str) -> None:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                fields[key] = round(int(line.split()[1]) / 1024, 1)
    print(f"{name:28s} {fields}", flush=True)


stage("python")
import tensorflow as tf  # noqa: E402,F401

stage("tensorflow")
from pgn_tf import config as config_lib  # noqa: E402
from pgn_tf.data import dataset  # noqa: E402
from pgn_tf.decoding.search import DecodeRequest  # noqa: E402
from pgn_tf.inference.evaluator import decode_split  # noqa: E402
from pgn_tf.inference.summarizer import Summarizer  # noqa: E402

stage("pgn_tf modules")
examples = dataset.read_split(sys.argv[2], None, None)
stage("data read")
cfg = config_lib.resolve("reference_onmt", [])
loaded = Summarizer.from_model_dir(sys.argv[1], "latest")
stage("model loaded")
decode_cfg = dataclasses.replace(cfg.decode, batch_size=64)
summarizer = Summarizer(loaded.model, loaded.vocab,
                        dataclasses.replace(loaded.cfg, decode=decode_cfg).validate())
request = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
decode_split(summarizer, examples[:64], batch_size=64, request=request)
stage("warm-up batch")
if os.environ.get("TRIM") == "1":
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    stage("  malloc_trim(0)")
decode_split(summarizer, examples, batch_size=64, request=request)
stage("all decoded")
