"""Serving load: QPS and p50/p99 latency of serving.server over gRPC, with and without batching.

    python -m benchmarks.serve_load --model_base_path runs/quickstart/export/pgn \
        [--concurrency 1 16] [--seconds 20] [--data validation.jsonl.gz] \
        [--max_batch_size 16] [--batch_timeout_micros 20000] [--num_batch_threads 1]

For each batching mode a fresh server process starts on loopback; each concurrency level runs
for --seconds with one article per request (the realistic TF Serving client pattern), counting
failures. Bounded in time and count; it only talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from benchmarks.common import articles_from, emit, percentiles
from pgn_tf.serving.client import make_request, summarize
from pgn_tf.serving.process import start_server, stop_server


def load(port: int, model: str, articles: list[str], concurrency: int, seconds: float) -> dict:
    latencies, failures = [], []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(k: int) -> None:
        i = k
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")  # one connection per client
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                stub.Predict(make_request(model, [articles[i % len(articles)]]), timeout=120)
                with lock:
                    latencies.append(time.perf_counter() - t0)
            except grpc.RpcError as e:
                with lock:
                    failures.append(e.code().name)
            i += concurrency
        channel.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"requests": len(latencies), "failures": len(failures),
            "qps": round(len(latencies) / wall, 2), **percentiles(latencies)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True)
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--data")
    p.add_argument("--max_batch_size", type=int, default=16)
    p.add_argument("--batch_timeout_micros", type=int, default=20000)
    p.add_argument("--num_batch_threads", type=int, default=1,
                   help="batches run at once (TF Serving's advice: the number of cores)")
    a = p.parse_args()
    articles = articles_from(a.data, 200)
    conf = tempfile.NamedTemporaryFile("w", suffix=".config", delete=False)
    conf.write(f"max_batch_size {{ value: {a.max_batch_size} }}\n"
               f"batch_timeout_micros {{ value: {a.batch_timeout_micros} }}\n"
               "max_enqueued_batches { value: 64 }\n"
               f"num_batch_threads {{ value: {a.num_batch_threads} }}\n")
    conf.close()
    for batching in (False, True):
        extra = ["--enable_batching", "--batching_parameters_file", conf.name] if batching else []
        proc, port, _ = start_server(a.model_base_path, a.model_name, extra)
        try:
            summarize(f"127.0.0.1:{port}", a.model_name, articles[:1])  # warm-up
            for c in a.concurrency:
                res = load(port, a.model_name, articles, c, a.seconds)
                emit("serve_load", {"batching": batching, "concurrency": c, **res,
                                    "seconds": a.seconds, "max_batch_size": a.max_batch_size,
                                    "num_batch_threads": a.num_batch_threads})
        finally:
            stop_server(proc)


if __name__ == "__main__":
    main()
