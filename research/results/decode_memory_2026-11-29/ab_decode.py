"""Interleaved before/after decoding of the 2,865 validation descriptions, as compare_peer
decodes them (beam 4, batch 64, forced to 30 tokens; one warm-up batch untimed), each run a
fresh process in its checkout, ABBA order. Prints each run's seconds, articles/s, peak RSS
(VmHWM) and TensorFlow's allocator peak, and whether both sides wrote the same summaries.

    python ab_decode.py BEFORE_CHECKOUT AFTER_CHECKOUT MODEL_DIR VALIDATION_JSONL_GZ OUT_DIR [ROUNDS]
"""

import json
import os
import subprocess
import sys

CHILD = r'''
import dataclasses, json, sys, time
from pgn_tf.utils import onednn
onednn.start()
import tensorflow as tf
import pgn_tf
from pgn_tf import config as config_lib
from pgn_tf.data import dataset
from pgn_tf.inference.api import DecodeRequest
from pgn_tf.inference.summarizer import Summarizer
md, data, out = sys.argv[1:4]
arts = [e.article for e in dataset.read_split(data, None, None)]
loaded = Summarizer.from_model_dir(md, "latest")
cfg = config_lib.resolve("reference_onmt", [])
s = Summarizer(loaded.model, loaded.vocab, dataclasses.replace(
    loaded.cfg, decode=dataclasses.replace(cfg.decode, batch_size=64)).validate())
req = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
s.decode(arts[:64], 64, request=req)
t = time.perf_counter()
rows = s.decode(arts, 64, request=req)
sec = time.perf_counter() - t
with open(out, "w") as f:
    f.writelines(r["summary"] + "\n" for r in rows)
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print("RESULT " + json.dumps({"pgn_tf": pgn_tf.__file__, "seconds": round(sec, 2),
      "articles_per_sec": round(len(arts) / sec, 2), "peak_rss_mib": round(hwm / 1024, 1),
      "allocator_peak_mib": round(tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2**20, 1)}))
'''


def run(checkout, model_dir, data, out, child=CHILD):
    """`child` (a program printing one RESULT line) in a fresh process that imports pgn_tf from
    `checkout`, with MODEL_DIR DATA OUT as its arguments: the RESULT's JSON."""
    proc = subprocess.run([sys.executable, "-c", child, model_dir, data, out], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": checkout, "TF_CPP_MIN_LOG_LEVEL": "2"},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode or not line:
        sys.exit(proc.stdout[-3000:])
    return json.loads(line[-1][7:])


def main():
    before, after, model_dir, data, out_dir = sys.argv[1:6]
    n = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    os.makedirs(out_dir, exist_ok=True)
    flags = sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags")
                    for f in line.split(":")[1].split()} & {"avx2", "avx512f", "avx512_bf16", "amx_tile"})
    print("cpu_flags:", " ".join(flags), flush=True)
    results = []
    for i in range(n):
        sides = [("before", before), ("after", after)][:: 1 if i % 2 == 0 else -1]
        got = {}
        for side, checkout in sides:
            got[side] = run(checkout, model_dir, data, os.path.join(out_dir, f"{side}_{i}.txt"))
            print(f"round {i + 1} {side}: {json.dumps(got[side])}", flush=True)
        same = open(os.path.join(out_dir, f"before_{i}.txt")).read() == open(
            os.path.join(out_dir, f"after_{i}.txt")).read()
        ratio = round(got["after"]["articles_per_sec"] / got["before"]["articles_per_sec"], 3)
        print(f"round {i + 1}: after/before articles/s {ratio}, RSS "
              f"{got['before']['peak_rss_mib']} -> {got['after']['peak_rss_mib']} MiB, "
              f"same summaries: {same}", flush=True)
        results.append({**got, "ratio": ratio, "same": same})
    ratios = sorted(r["ratio"] for r in results)
    print(json.dumps({"benchmark": "ab_decode", "cpu_flags": flags, "median_ratio": ratios[len(ratios) // 2],
                      "rounds": results}))


if __name__ == "__main__":
    main()
