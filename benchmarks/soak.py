"""Soak: serving.server under steady gRPC + REST load, mixed with hostile clients, while new
versions are pushed.

    python -m benchmarks.soak --model_base_path runs/export/pgn [--minutes 30] [--clients 32] \
        [--hostile 4] [--push_every 30] [--no_batching] [--data validation.jsonl.gz] \
        [--tls] [--stalled_streams 1000 --stalled_connections 10] [--trickle 2000] \
        [--trickle_sources 20]

The newest version under --model_base_path is copied into a temporary base as version 1 and
served by a fresh server process on loopback (with serving/batching.config unless
--no_batching). Half the clients use gRPC (one channel each), half REST (one keep-alive
connection each), one article a request, for --minutes; every --push_every seconds a new version
is published the way pgn_tf.export does it (a temp name, then a rename) and the one before the
previous is deleted. The well-formed clients' every failure counts. Beside them, --hostile
clients cycle through what a hostile client sends (`Hostile.KINDS`: malformed tensors, huge
declared shapes, 100,000-character labels, decoding work over the budget, heavy requests whose
deadline expires or which the client cancels mid-run, JSON bodies of millions of tiny values,
Content-Length with Transfer-Encoding, 4,000-digit numbers); an answer other than the expected
status counts as unexpected. With --stalled_streams and --trickle, the door's attackers run
beside them the whole time: gRPC streams that send headers and never a message
(benchmarks.stalled_grpc) and REST connections sending a byte every --trickle_every seconds
(benchmarks.trickle_rest); --tls serves gRPC over TLS, its clients and attackers with it. The
server's live model versions (the :pgn_tf:serving:live_versions
gauge) are read after every push. Prints requests, failures, p50/p99, the server's RSS after the
first swap and at the end, the live versions, the CPU's vector flags, and a JSON line. Bounded
in time; it only talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import tempfile
import threading
import time

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from benchmarks.common import articles_from, emit, percentiles
from benchmarks.load_clients import Load, grpc_channel
from benchmarks.pki import write_pki
from benchmarks.stalled_grpc import StalledStreams
from benchmarks.trickle_rest import (
    REQUEST_LINE,
    Trickler,
    raise_open_file_limit,
    source_addresses,
)
from pgn_tf.serving.client import make_request
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.utils import procfs
from pgn_tf.utils.machine import vector_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def newest_version(base: str) -> str:
    versions = [d for d in os.listdir(base) if d.isascii() and d.isdigit()]
    if not versions:
        raise SystemExit(f"soak: no version dir under {base}")
    return os.path.join(base, max(versions, key=int))


class Hostile:
    """Clients sending what a hostile client sends, each kind with the statuses it may get."""

    KINDS = ["wrong_dtype", "huge_declared_shape", "long_label", "unknown_version",
             "work_over_budget", "heavy_expiring", "heavy_cancelled", "garbage_bytes",
             "rest_bad_json", "rest_json_values", "rest_smuggling", "rest_long_label",
             "rest_huge_number"]

    def __init__(self, grpc_port: int, rest_port: int, model: str, article: str,
                 credentials: grpc.ChannelCredentials | None = None):
        self.grpc_port, self.rest_port, self.model, self.article = (grpc_port, rest_port, model,
                                                                    article)
        self.credentials = credentials
        self.lock = threading.Lock()
        self.outcomes: dict[str, dict[str, int]] = {k: {} for k in self.KINDS}
        self.unexpected: list[str] = []
        self.stop = threading.Event()
        self.json_values = b'{"instances": [' + b"{}," * 2_000_000 + b"{}]}"

    def _options(self, rows: int, beam: int, steps: int) -> predict_pb2.PredictRequest:
        req = make_request(self.model, [self.article] * rows)
        req.model_spec.signature_name = "summarize_options"
        for k, v in (("beam_size", beam), ("max_decode_steps", steps), ("min_decode_steps", steps)):
            req.inputs[k].CopyFrom(tf.make_tensor_proto(np.int32(v)))
        return req

    def _grpc(self, stub, channel, kind: str) -> str:
        req = make_request(self.model, [self.article])
        timeout = 30.0
        if kind == "wrong_dtype":
            req.inputs["articles"].CopyFrom(tf.make_tensor_proto(np.array([1, 2], np.int32)))
        elif kind == "huge_declared_shape":
            req.inputs["articles"].tensor_shape.dim[0].size = 10**9
        elif kind == "long_label":
            req.model_spec.version_label = "L" * 100_000
        elif kind == "unknown_version":
            req.model_spec.version.value = 987654321
        elif kind == "work_over_budget":
            req = self._options(256, 16, 400)
        elif kind == "heavy_expiring":
            req, timeout = self._options(16, 8, 64), 0.3
        elif kind == "heavy_cancelled":
            future = stub.Predict.future(self._options(16, 8, 64))
            future.add_done_callback(lambda _: None)
            self.stop.wait(0.1)
            future.cancel()
            return "CANCELLED" if future.cancelled() else "OK"
        elif kind == "garbage_bytes":
            call = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
            try:
                call(b"\xff\xfe garbage", timeout=30)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name
        try:
            stub.Predict(req, timeout=timeout)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def _rest(self, kind: str) -> str:
        path = f"/v1/models/{self.model}:predict"
        if kind == "rest_smuggling":
            chunk = json.dumps({"instances": [self.article]}).encode()
            raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(chunk) + 10}\r\n"
                   f"Transfer-Encoding: chunked\r\n\r\n{len(chunk):x}\r\n").encode() + chunk + \
                b"\r\n0\r\n\r\nGET /v1/models/" + self.model.encode() + b" HTTP/1.1\r\n\r\n"
            with socket.create_connection(("127.0.0.1", self.rest_port), timeout=30) as sock:
                sock.sendall(raw)
                got = b""
                while chunk_in := sock.recv(65536):
                    got += chunk_in
            answers = got.count(b"HTTP/1.1 ")
            return f"{got[9:12].decode()} x{answers}" if answers else "no answer"
        conn = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=30)
        try:
            if kind == "rest_long_label":
                conn.request("GET", f"/v1/models/{self.model}/labels/" + "L" * 60_000)
            else:
                body = {"rest_bad_json": b'{"instances": [',
                        "rest_json_values": self.json_values,
                        "rest_huge_number": json.dumps({
                            "signature_name": "summarize_options",
                            "inputs": {"articles": [self.article], "beam_size": int("9" * 4000),
                                       "max_decode_steps": 4, "min_decode_steps": 0}}).encode(),
                        }[kind]
                conn.request("POST", path, body=body)
            resp = conn.getresponse()
            data = resp.read()
            return f"{resp.status}" + (" long" if len(data) > 1000 else "")
        finally:
            conn.close()

    EXPECTED = {"wrong_dtype": {"INVALID_ARGUMENT"}, "huge_declared_shape": {"INVALID_ARGUMENT"},
                "long_label": {"NOT_FOUND"}, "unknown_version": {"NOT_FOUND"},
                "work_over_budget": {"INVALID_ARGUMENT"},
                "heavy_expiring": {"DEADLINE_EXCEEDED", "OK"},
                "heavy_cancelled": {"CANCELLED", "OK"}, "garbage_bytes": {"INVALID_ARGUMENT"},
                "rest_bad_json": {"400"}, "rest_json_values": {"400"},
                "rest_smuggling": {"400 x1"}, "rest_long_label": {"404"},
                "rest_huge_number": {"400"}}

    def client(self, k: int) -> None:
        channel = grpc_channel(self.grpc_port, self.credentials)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        i = k
        while not self.stop.is_set():
            kind = self.KINDS[i % len(self.KINDS)]
            try:
                got = self._rest(kind) if kind.startswith("rest_") else \
                    self._grpc(stub, channel, kind)
            except (OSError, http.client.HTTPException) as e:
                got = f"client error {type(e).__name__}"
            with self.lock:
                self.outcomes[kind][got] = self.outcomes[kind].get(got, 0) + 1
                if got not in self.EXPECTED[kind]:
                    self.unexpected.append(f"{kind}: {got}")
            i += 1
        channel.close()


def live_versions(rest_port: int) -> int | None:
    """The server's :pgn_tf:serving:live_versions gauge."""
    conn = http.client.HTTPConnection("127.0.0.1", rest_port, timeout=30)
    try:
        conn.request("GET", "/monitoring/prometheus/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in text.splitlines():
        if line.startswith(":pgn_tf:serving:live_versions "):
            return int(float(line.split()[1]))
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="an export's NAME dir")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--clients", type=int, default=32, help="half gRPC, half REST")
    p.add_argument("--hostile", type=int, default=4, help="hostile clients beside them")
    p.add_argument("--push_every", type=float, default=30.0, help="seconds between versions")
    p.add_argument("--no_batching", action="store_true")
    p.add_argument("--data", help="articles (any pgn_tf format); default: synthetic")
    p.add_argument("--tls", action="store_true",
                   help="gRPC over TLS (a throw-away CA: benchmarks.pki); REST stays plaintext")
    p.add_argument("--stalled_streams", type=int, default=0,
                   help="gRPC streams that send headers and never a message, held beside the "
                        "load (benchmarks.stalled_grpc.StalledStreams)")
    p.add_argument("--stalled_connections", type=int, default=10,
                   help="the connections the stalled streams are spread over")
    p.add_argument("--trickle", type=int, default=0,
                   help="REST connections sending one byte every --trickle_every seconds "
                        "(benchmarks.trickle_rest.Trickler)")
    p.add_argument("--trickle_every", type=float, default=10.0)
    p.add_argument("--trickle_source", default="127.0.0.2",
                   help="the trickling connections' first loopback address (the clients use "
                        "127.0.0.1)")
    p.add_argument("--trickle_sources", type=int, default=1,
                   help="loopback addresses the trickling connections are spread over, from "
                        "--trickle_source on (each within --rest_api_max_connections_per_client)")
    a = p.parse_args()
    source = newest_version(a.model_base_path)
    articles = articles_from(a.data, 200)
    work = tempfile.mkdtemp(prefix="soak-")
    base = os.path.join(work, a.model_name)
    shutil.copytree(source, os.path.join(base, "1"))
    monitoring = os.path.join(work, "monitoring.config")
    with open(monitoring, "w") as f:
        f.write('prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }\n')
    extra = ["--file_system_poll_wait_seconds", "1", "--monitoring_config_file", monitoring]
    if not a.no_batching:
        extra += ["--enable_batching", "--batching_parameters_file",
                  os.path.join(ROOT, "serving", "batching.config")]
    credentials = None
    if a.tls:
        pki = write_pki(os.path.join(work, "pki"))
        extra += ["--ssl_config_file", pki["ssl_config"], "--allow_plaintext_rest"]
        credentials = grpc.ssl_channel_credentials(root_certificates=open(pki["ca"], "rb").read())
    if a.trickle:
        raise_open_file_limit(a.trickle + a.clients + 4096)
    if a.stalled_streams:  # the attacker another client than the load (stalled_grpc's note)
        extra = ["--host", "::", *extra]
    proc, grpc_port, rest_port = start_server(base, a.model_name, extra)
    load = Load(grpc_port, rest_port, a.model_name, articles, credentials)
    hostile = Hostile(grpc_port, rest_port, a.model_name, articles[0], credentials)
    stalled = StalledStreams(f"[::1]:{grpc_port}", a.stalled_streams, a.stalled_connections,
                             credentials) if a.stalled_streams else None
    trickler = Trickler(rest_port, a.trickle, a.trickle_every,
                        source=source_addresses(a.trickle_source, a.trickle_sources),
                        lead=REQUEST_LINE.replace(b"default", a.model_name.encode())) \
        if a.trickle else None
    pushed, live_seen, after_first_swap = [1], [], None
    try:
        print(f"soak: {a.minutes:g} min, {a.clients} clients (gRPC{' over TLS' if a.tls else ''}"
              f" + REST) and {a.hostile} hostile ones, {a.stalled_streams} stalled gRPC streams "
              f"over {a.stalled_connections} connections, {a.trickle} trickling REST "
              f"connections, a version every {a.push_every:g} s, batching "
              f"{'off' if a.no_batching else 'on'}; cpu {vector_flags()}", flush=True)
        for attacker in (stalled, trickler):
            if attacker is not None:
                attacker.start()
        threads = [threading.Thread(target=load.grpc_client if k % 2 == 0 else load.rest_client,
                                    args=(k,), daemon=True) for k in range(a.clients)]
        threads += [threading.Thread(target=hostile.client, args=(k,), daemon=True)
                    for k in range(a.hostile)]
        for t in threads:
            t.start()
        time.sleep(min(10.0, a.minutes * 6))  # warm-up: connections open, first batches run
        start = procfs.memory_mb(proc.pid)
        with load.lock:
            load.latencies.clear()
        t_start = time.monotonic()
        end = t_start + a.minutes * 60
        next_push = t_start + a.push_every
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_push, end) - time.monotonic()))
            if time.monotonic() >= next_push and time.monotonic() < end:
                if len(pushed) == 2:  # the first swap has settled for a whole period
                    after_first_swap = procfs.memory_mb(proc.pid)
                live_seen.append(live_versions(rest_port))
                print(f"  {time.monotonic() - t_start:6.0f} s: version {pushed[-1]} serving, "
                      f"live versions {live_seen[-1]}, server {procfs.memory_mb(proc.pid)}",
                      flush=True)
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
        hostile.stop.set()
        for t in threads:
            t.join(120)
        stalled_counts = stalled.counts() if stalled is not None else None  # open ones too
        if stalled is not None:
            stalled.stop()
        trickle_counts = trickler.counts() if trickler is not None else None
        if trickler is not None:
            trickler.stop()
        final = procfs.memory_mb(proc.pid)
        settle = time.monotonic() + 60  # a push in the last seconds may still be loading
        while (live_end := live_versions(rest_port)) != 1 and time.monotonic() < settle:
            time.sleep(1)
        alive = proc.poll() is None
    finally:
        load.stop.set()
        hostile.stop.set()
        for attacker in (stalled, trickler):
            if attacker is not None:
                attacker.stop()  # a second stop (after the one above) does nothing
        stop_server(proc)
        shutil.rmtree(work, ignore_errors=True)
    with load.lock:
        failures = list(load.failures)
        latencies = list(load.latencies)
        versions = sorted(load.versions)
    if failures:
        print("first failures:", *failures[:5], sep="\n  ")
    with hostile.lock:
        outcomes = {k: dict(v) for k, v in hostile.outcomes.items()}
        unexpected = list(hostile.unexpected)
    print("hostile requests by kind and answer:")
    for kind, got in outcomes.items():
        print(f"  {kind:20s} {got}")
    if unexpected:
        print("first unexpected answers:", *unexpected[:5], sep="\n  ")
    base_rss = (after_first_swap or start)["rss_mb"]
    print(f"RSS after the first swap {base_rss} MB, at the end {final['rss_mb']} MB "
          f"({final['rss_mb'] / base_rss - 1:+.1%}); live versions after each push "
          f"{live_seen}, at the end {live_end} (the policy keeps 1; read once the last push has "
          "loaded)")
    emit("soak", {
        "minutes": round(wall / 60, 2), "clients": a.clients,
        "batching": not a.no_batching, "versions_pushed": len(pushed) - 1,
        "versions_answered_grpc": f"{versions[0]}..{versions[-1]}" if versions else "",
        "requests": len(latencies), "failures": len(failures),
        "qps": round(len(latencies) / wall, 1), **percentiles(latencies),
        "hostile_requests": sum(sum(v.values()) for v in outcomes.values()),
        "hostile_unexpected": len(unexpected), "hostile_outcomes": outcomes,
        "rss_start_mb": start["rss_mb"], "rss_after_first_swap_mb": base_rss,
        "rss_end_mb": final["rss_mb"],
        "rss_end_vs_after_first_swap": round(final["rss_mb"] / base_rss - 1, 4),
        "live_versions_after_pushes_max": max((x for x in live_seen if x is not None),
                                              default=None),
        "live_versions_end": live_end, "policy_keeps": 1,
        "rss_peak_mb": final["peak_rss_mb"],
        "threads_start": start["threads"], "threads_end": final["threads"],
        "server_alive": alive, "tls": a.tls, "stalled_streams": a.stalled_streams,
        "stalled_connections": a.stalled_connections, "stalled": stalled_counts,
        "trickle": a.trickle, "trickle_every_s": a.trickle_every, "trickler": trickle_counts,
        "cpu_flags": vector_flags(), "tf": tf.__version__,
    })


if __name__ == "__main__":
    main()
