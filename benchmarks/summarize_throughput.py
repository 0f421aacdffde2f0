"""Using a trained model: articles/s of `python -m pgn_tf.summarize --input` over a file, and of
`pgn_tf.Summarizer` calls of 32 articles (compiled) against the same call run eagerly.

    python -m benchmarks.summarize_throughput --model_dir runs/pgn --data validation.jsonl.gz \
        [--saved_model export/pgn/1] [--calls 20] [--eager_calls 2]

The file figure is the CLI's own (articles decoded / seconds of its loop, first trace included),
beside the whole command's wall time (model loading included). The call figures exclude the
first call (the trace); each call decodes the next 32 articles of the file.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks.common import emit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--saved_model", help="also time the SavedModel form")
    p.add_argument("--data", required=True, help="JSONL(.gz) with an article field")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--eager_calls", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()

    import tensorflow as tf

    from pgn_tf.data.dataset import read_split
    from pgn_tf.inference.corpus import summarize_corpus
    from pgn_tf.inference.summarizer import Summarizer

    result = {"batch": a.batch}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        counts = summarize_corpus(Summarizer.from_model_dir(a.model_dir), a.data,
                                  os.path.join(tmp, "out.jsonl"), progress="off")
        result["cli_articles"] = counts.summarized
        result["cli_articles_per_sec"] = counts.articles_per_sec
        result["cli_wall_seconds"] = round(time.perf_counter() - t0, 2)

    articles = [e.article for e in read_split(a.data, None, a.batch * (a.calls + 1))]
    chunks = [articles[i : i + a.batch] for i in range(0, len(articles), a.batch)]
    chunks = [c for c in chunks if len(c) == a.batch]

    def timed(fn, calls: int) -> list[float]:
        fn(chunks[0])  # the trace
        out = []
        for c in (chunks[1:] * (calls // max(1, len(chunks) - 1) + 1))[:calls]:
            t = time.perf_counter()
            fn(c)
            out.append(time.perf_counter() - t)
        return out

    s = Summarizer.from_model_dir(a.model_dir)
    lat = timed(s, a.calls)
    result["call_articles_per_sec"] = round(a.batch * len(lat) / sum(lat), 2)
    result["call_p50_ms"] = round(1000 * float(np.median(lat)), 1)
    result["traces"] = s.compiled.tracing_count()
    eager = timed(lambda c: s.summarize(tf.constant(c))["summaries"].numpy(), a.eager_calls)
    result["eager_articles_per_sec"] = round(a.batch * len(eager) / sum(eager), 2)
    if a.saved_model:
        served = Summarizer.from_saved_model(a.saved_model)
        lat = timed(served, a.calls)
        result["saved_model_call_articles_per_sec"] = round(a.batch * len(lat) / sum(lat), 2)
    emit("summarize_throughput", result)


if __name__ == "__main__":
    main()
