"""Soak: serving.server under steady gRPC + REST load while new versions are pushed.

    python benchmarks/soak.py --model_base_path runs/export/pgn [--minutes 10] [--clients 32] \
        [--push_every 30] [--no_batching] [--data validation.jsonl.gz]

The newest version under --model_base_path is copied into a temporary base as version 1 and
served by a fresh server process on loopback (with serving/batching.config unless
--no_batching). Half the clients use gRPC (one channel each), half REST (one keep-alive
connection each), one article a request, for --minutes; every --push_every seconds a new version
is published the way pgn_tf.export does it (a temp name, then a rename) and the one before the
previous is deleted. Every request is well-formed, so every failure counts. Prints requests,
failures, p50/p99, the server's RSS and threads at start and end, the CPU's vector flags, and a
JSON line. Bounded in time; it only talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import prediction_service_pb2_grpc  # noqa: E402

from benchmarks.common import articles_from, emit, percentiles, vector_flags  # noqa: E402
from serving.client import make_request  # noqa: E402
from serving.process import start_server, stop_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def proc_status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key.lower() + "_mb"] = round(int(value.split()[0]) / 1024, 1)
            elif key == "Threads":
                out["threads"] = int(value)
    return out


def newest_version(base: str) -> str:
    versions = [d for d in os.listdir(base) if d.isascii() and d.isdigit()]
    if not versions:
        raise SystemExit(f"soak: no version dir under {base}")
    return os.path.join(base, max(versions, key=int))


class Load:
    """Client threads that record latencies and failures until stop is set."""

    def __init__(self, grpc_port: int, rest_port: int, model: str, articles: list[str]):
        self.grpc_port, self.rest_port, self.model = grpc_port, rest_port, model
        self.articles = articles
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.versions: set[int] = set()
        self.stop = threading.Event()

    def _record(self, t0: float, failure: str | None, version: int | None = None) -> None:
        with self.lock:
            if failure is None:
                self.latencies.append(time.perf_counter() - t0)
                if version is not None:
                    self.versions.add(version)
            else:
                self.failures.append(failure)

    def grpc_client(self, k: int) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        i = k
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                r = stub.Predict(make_request(self.model, [self.articles[i % len(self.articles)]]),
                                 timeout=60)
                self._record(t0, None, r.model_spec.version.value)
            except grpc.RpcError as e:
                self._record(t0, f"gRPC {e.code().name}: {e.details()}")
            i += 1
        channel.close()

    def rest_client(self, k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=60)
        path = f"/v1/models/{self.model}:predict"
        i = k
        while not self.stop.is_set():
            body = json.dumps({"instances": [self.articles[i % len(self.articles)]]})
            t0 = time.perf_counter()
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                self._record(t0, None if resp.status == 200 else
                             f"REST {resp.status}: {data[:200].decode('utf-8', 'replace')}")
            except (OSError, http.client.HTTPException) as e:
                self._record(t0, f"REST {type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=60)
            i += 1
        conn.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="an export's NAME dir")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=32, help="half gRPC, half REST")
    p.add_argument("--push_every", type=float, default=30.0, help="seconds between versions")
    p.add_argument("--no_batching", action="store_true")
    p.add_argument("--data", help="articles (any pgn_tf format); default: synthetic")
    a = p.parse_args()
    source = newest_version(a.model_base_path)
    articles = articles_from(a.data, 200)
    work = tempfile.mkdtemp(prefix="soak-")
    base = os.path.join(work, a.model_name)
    shutil.copytree(source, os.path.join(base, "1"))
    extra = ["--file_system_poll_wait_seconds", "1"]
    if not a.no_batching:
        extra += ["--enable_batching", "--batching_parameters_file",
                  os.path.join(ROOT, "serving", "batching.config")]
    proc, grpc_port, rest_port = start_server(base, a.model_name, extra)
    load = Load(grpc_port, rest_port, a.model_name, articles)
    pushed = [1]
    try:
        print(f"soak: {a.minutes:g} min, {a.clients} clients (gRPC + REST), a version every "
              f"{a.push_every:g} s, batching {'off' if a.no_batching else 'on'}; "
              f"cpu {vector_flags()}", flush=True)
        threads = [threading.Thread(target=load.grpc_client if k % 2 == 0 else load.rest_client,
                                    args=(k,), daemon=True) for k in range(a.clients)]
        for t in threads:
            t.start()
        time.sleep(min(10.0, a.minutes * 6))  # warm-up: connections open, first batches run
        start = proc_status(proc.pid)
        with load.lock:
            load.latencies.clear()
        t_start = time.monotonic()
        end = t_start + a.minutes * 60
        next_push = t_start + a.push_every
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_push, end) - time.monotonic()))
            if time.monotonic() >= next_push and time.monotonic() < end:
                v = pushed[-1] + 1
                tmp = os.path.join(base, f".tmp-{v}")
                shutil.copytree(source, tmp)
                os.rename(tmp, os.path.join(base, str(v)))
                pushed.append(v)
                if len(pushed) >= 3:  # the server has moved past it: delete it, as a push would
                    shutil.rmtree(os.path.join(base, str(pushed[-3])), ignore_errors=True)
                next_push += a.push_every
        wall = time.monotonic() - t_start
        load.stop.set()
        for t in threads:
            t.join(120)
        final = proc_status(proc.pid)
        alive = proc.poll() is None
    finally:
        load.stop.set()
        stop_server(proc)
        shutil.rmtree(work, ignore_errors=True)
    with load.lock:
        failures = list(load.failures)
        latencies = list(load.latencies)
        versions = sorted(load.versions)
    if failures:
        print("first failures:", *failures[:5], sep="\n  ")
    emit("soak", {
        "minutes": round(wall / 60, 2), "clients": a.clients,
        "batching": not a.no_batching, "versions_pushed": len(pushed) - 1,
        "versions_answered_grpc": f"{versions[0]}..{versions[-1]}" if versions else "",
        "requests": len(latencies), "failures": len(failures),
        "qps": round(len(latencies) / wall, 1), **percentiles(latencies),
        "rss_start_mb": start["vmrss_mb"], "rss_end_mb": final["vmrss_mb"],
        "rss_peak_mb": final["vmhwm_mb"],
        "threads_start": start["threads"], "threads_end": final["threads"],
        "server_alive": alive, "cpu_flags": vector_flags(), "tf": tf.__version__,
    })


if __name__ == "__main__":
    main()
