"""How soon a decode stops costing CPU once its request is gone (serving.cancel).

    python -m benchmarks.deadline_stop --model_base_path runs/export/pgn [--deadlines 0.5 1 2]

Serves the newest version under --model_base_path in-process (no batching, a work budget
large enough for the request), sends summarize_options requests that would decode for many
seconds (--rows articles, --beam, --steps forced steps) with a gRPC deadline, and times from
each deadline to the end of the server's run (the watchdog's count of runs under way reaching
zero). Beside it, one decoding step of the same batch: the difference of two full runs of
--steps and --steps/2 forced steps, over --steps/2. Prints the figures, the CPU's vector flags
and a JSON line. Talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import time

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

from benchmarks.common import articles_from, cpu_flags, emit
from pgn_tf.serving.client import make_request
from pgn_tf.serving.service import Server
from pgn_tf.utils.machine import vector_flags


def options_request(model: str, articles: list[str], beam: int, steps: int):
    req = make_request(model, articles, signature="summarize_options")
    for k, v in (("beam_size", beam), ("max_decode_steps", steps), ("min_decode_steps", steps)):
        req.inputs[k].CopyFrom(tf.make_tensor_proto(np.int32(v)))
    return req


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="an export's NAME dir")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--beam", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--deadlines", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    p.add_argument("--data", help="articles (any pgn_tf format); default: synthetic")
    a = p.parse_args()
    articles = (articles_from(a.data, a.rows) * a.rows)[: a.rows]
    srv = Server({a.model_name: a.model_base_path}, poll_seconds=0, max_decode_work=10**12)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{srv.port}"))
        full = {}
        for steps in (a.steps // 2, a.steps):
            stub.Predict(options_request(a.model_name, articles, a.beam, steps), timeout=600)
            t0 = time.perf_counter()
            stub.Predict(options_request(a.model_name, articles, a.beam, steps), timeout=600)
            full[steps] = time.perf_counter() - t0
        step_ms = (full[a.steps] - full[a.steps // 2]) / (a.steps - a.steps // 2) * 1000
        print(f"deadline_stop: {a.rows} rows x beam {a.beam}, {a.steps} forced steps: a full run "
              f"{full[a.steps]:.2f} s, one decoding step {step_ms:.1f} ms; cpu {cpu_flags()}")
        stops = []
        for deadline in a.deadlines:
            t0 = time.monotonic()
            try:
                stub.Predict(options_request(a.model_name, articles, a.beam, a.steps),
                             timeout=deadline)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            expired = t0 + deadline
            while srv.watchdog.active():
                time.sleep(0.001)
            after = (time.monotonic() - expired) * 1000
            stops.append({"deadline_s": deadline, "client_got": code,
                          "run_ended_ms_after_deadline": round(after, 1),
                          "in_decoding_steps": round(after / step_ms, 2)})
            print(f"  deadline {deadline:g} s: client got {code}; the server's run ended "
                  f"{after:.1f} ms after the deadline ({after / step_ms:.2f} decoding steps)")
    finally:
        srv.stop()
    emit("deadline_stop", {"rows": a.rows, "beam": a.beam, "steps": a.steps,
                           "full_run_s": round(full[a.steps], 3),
                           "decoding_step_ms": round(step_ms, 2), "stops": stops,
                           "cpu_flags": vector_flags(), "tf": tf.__version__})


if __name__ == "__main__":
    main()
