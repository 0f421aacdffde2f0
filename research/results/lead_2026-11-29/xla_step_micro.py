"""Micro A/B: the pointer-generator's decode step (reference_onmt sizes, float32, beam 4 x batch 64
= 256 rows, L = 100, 30 steps in a tf.while_loop, eq. 9 in parts as the beam search takes it)
plain against the same step under tf.function(jit_compile=True) (one XLA cluster a step).
Interleaved rounds; medians; max abs difference of the final state."""
import json
import os
import time

import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf.decoding.beam_state import tile_beams
from pgn_tf.layers.pointer import copy_slots
from pgn_tf.models import build_model

B, K, L, T = 64, 4, 100, 30
ROUNDS = int(os.environ.get("ROUNDS", "5"))
cfg = config_lib.preset("reference_onmt")
V = cfg.data.vocab_size
model = build_model(cfg.model, V)
rng = np.random.default_rng(0)
enc_ids = tf.constant(rng.integers(4, V, size=(B, L)), tf.int32)
enc, state = model.encode(enc_ids, tf.fill([B], L), enc_ids, tf.zeros([B], tf.int32))
enc["copy_slot"], enc["copy_first"] = copy_slots(enc["ext_ids"], enc["mask"])
enc, state = tile_beams(enc, K), tile_beams(state, K)
ids0 = tf.fill([B * K], 2)


def step(ids, st):
    mix, st, _ = model.decode_step(ids, 0, st, enc, mixture=True)
    return mix.probs, mix.p_gen, mix.attn, st


def make(fn):
    @tf.function
    def run():
        def body(t, ids, st, acc):
            probs, p_gen, attn, st = fn(ids, st)
            ids = tf.cast(tf.argmax(probs, -1), tf.int32)
            return t + 1, ids, st, acc + tf.reduce_sum(p_gen) + tf.reduce_sum(attn)
        _, ids, st, acc = tf.while_loop(lambda t, *_: t < T, body,
                                        (tf.constant(0), ids0, state, tf.constant(0.0)))
        return ids, st, acc
    return run


runs = {"plain": make(step), "xla": make(tf.function(step, jit_compile=True))}
first_call_s = {}
outs = {}
for k, f in runs.items():  # trace (and, for xla, compile)
    t0 = time.perf_counter()
    outs[k] = f()
    first_call_s[k] = time.perf_counter() - t0
diff = max(float(tf.reduce_max(tf.abs(outs["plain"][1][k] - outs["xla"][1][k])))
           for k in outs["plain"][1])
same_ids = bool(tf.reduce_all(outs["plain"][0] == outs["xla"][0]))
times = {k: [] for k in runs}
for _ in range(ROUNDS):
    for k, f in runs.items():
        t0 = time.perf_counter()
        f()
        times[k].append(time.perf_counter() - t0)
med = {k: float(np.median(v)) for k, v in times.items()}
print(json.dumps({"rows": B * K, "L": L, "steps": T, "median_s": med,
                  "ms_per_step": {k: 1000 * v / T for k, v in med.items()},
                  "xla_speedup": med["plain"] / med["xla"], "first_call_s": first_call_s, "max_abs_state_diff": diff,
                  "same_last_ids": same_ids, "isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "native"),
                  "xla_flags": os.environ.get("XLA_FLAGS", "")}))
