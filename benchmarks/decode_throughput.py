"""Decoding speed: articles/s of in-process beam search and of the exported SavedModel.

    python -m benchmarks.decode_throughput --model_dir runs/quickstart/model \
        [--data validation.jsonl.gz] [--articles 256] [--beams 1 4] [--batches 1 32] \
        [--sort_by_length] [--set decode.KEY=VALUE ...] [--passes 1] [--profile DIR]

Each (beam, batch) cell decodes the same articles after one warm-up batch and prints
articles/s (wall clock) and the process's CPU milliseconds per article (less sensitive to other
work on a shared machine), with the CPU's vector flags; a JSON line per cell follows.
--passes N times N passes over the articles, each its own line: the first pays for every
shape the warm-up batch did not trace or compile (decode.jit_step compiles a step per source
length and batch size), the later ones show the steady state a server or a long evaluation
reaches.
--sort_by_length decodes batches of similar article length, as evaluate does. `--profile DIR`
traces the in-process search over the same articles once more, after the timed pass of each
cell, with tf.profiler (TensorBoard's profile tab) and prints the ops that took the most time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import tensorflow as tf

from benchmarks.common import add_cpu_flag, articles_from, cpu_flags, emit, emulate_cpu, top_ops
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.saved_model import export


def time_fn(fn, articles: list[str], batch: int, warm_up: bool = True
            ) -> tuple[float, float, float]:
    """(articles/s, mean summary characters, CPU ms per article)."""
    if warm_up:
        fn(articles[:batch])  # tracing
    n = (len(articles) // batch) * batch
    t0, c0 = time.perf_counter(), time.process_time()
    lengths = []
    for i in range(0, n, batch):
        out = fn(articles[i : i + batch])
        lengths.append(float(tf.reduce_mean(tf.cast(tf.strings.length(out), tf.float32))))
    cpu_ms = 1000 * (time.process_time() - c0) / n
    return n / (time.perf_counter() - t0), sum(lengths) / len(lengths), cpu_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data")
    p.add_argument("--articles", type=int, default=256)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--max_steps", type=int, help="decode.max_dec_steps override")
    p.add_argument("--min_steps", type=int, help="decode.min_dec_steps override")
    p.add_argument("--skip_saved_model", action="store_true")
    p.add_argument("--sort_by_length", action="store_true",
                   help="batches of similar article length (as evaluate decodes)")
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE")
    add_cpu_flag(p)
    p.add_argument("--passes", type=int, default=1,
                   help="timed passes over the articles, each reported (the first compiles)")
    p.add_argument("--profile", metavar="DIR", help="tf.profiler trace of one more pass")
    a = p.parse_args()
    if a.passes < 1:
        p.error("--passes must be at least 1")
    emulate_cpu(a.cpu, "benchmarks.decode_throughput", sys.argv[1:])
    articles = articles_from(a.data, a.articles)[: a.articles]
    if a.sort_by_length:
        articles.sort(key=lambda x: len(x.split()))
    summarizer = Summarizer.from_model_dir(a.model_dir, overrides=a.set)
    saved = None
    if not a.skip_saved_model:
        tmp = tempfile.mkdtemp()
        path = export.export(a.model_dir, tmp, "bench", version=1, check=False,
                             overrides=[x for x in a.set if x.startswith("decode.")])
        saved = tf.saved_model.load(path).signatures["summarize_options"]
    dc = summarizer.cfg.decode
    max_steps = a.max_steps or dc.max_dec_steps
    min_steps = dc.min_dec_steps if a.min_steps is None else a.min_steps
    flags = cpu_flags()
    for beam in a.beams:
        request = DecodeRequest(beam_size=beam, max_steps=max_steps, min_steps=min_steps)
        fn = tf.function(lambda x, r=request: summarizer.summarize(x, r)["summaries"],
                         input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)

        def run(x, fn=fn):
            return fn(tf.constant(x))

        for batch in a.batches:
            for i in range(a.passes):
                rate, chars, cpu_ms = time_fn(run, articles, batch, warm_up=i == 0)
                result = {"beam": beam, "batch": batch, "articles_per_sec": round(rate, 2),
                          "cpu_ms_per_article": round(cpu_ms, 2),
                          "mean_summary_chars": round(chars, 1), "max_dec_steps": max_steps,
                          "articles": len(articles), "cpu_flags": flags}
                if a.passes > 1:
                    result["pass"] = i + 1
                if i + 1 < a.passes:
                    emit("decode_in_process", result)
            if a.profile:
                logdir = os.path.join(a.profile, f"beam{beam}_batch{batch}")
                tf.profiler.experimental.start(logdir)
                time_fn(run, articles, batch)
                tf.profiler.experimental.stop()
                result["top_ops_pct"] = top_ops(logdir)
            emit("decode_in_process", result)
            if saved is not None:
                def run_saved(x, beam=beam):
                    return saved(articles=tf.constant(x), beam_size=tf.constant(beam),
                                 max_decode_steps=tf.constant(max_steps),
                                 min_decode_steps=tf.constant(min_steps))["summaries"]

                rate, chars, cpu_ms = time_fn(run_saved, articles, batch)
                emit("decode_saved_model", {"beam": beam, "batch": batch,
                                            "articles_per_sec": round(rate, 2),
                                            "cpu_ms_per_article": round(cpu_ms, 2),
                                            "max_dec_steps": max_steps,
                                            "articles": len(articles), "cpu_flags": flags})


if __name__ == "__main__":
    main()
