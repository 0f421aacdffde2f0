"""Well-formed clients of the server under test (gRPC and REST, one article a request) that
record latencies and failures: the load beside which benchmarks.soak, stalled_grpc and
trickle_rest measure their attackers.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from pgn_tf.serving.client import make_request


def grpc_channel(port: int, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel to the server on loopback: over TLS with `credentials` (the server's
    certificate names 127.0.0.1: benchmarks.pki), else plaintext."""
    target = f"127.0.0.1:{port}"
    return grpc.secure_channel(target, credentials) if credentials is not None else \
        grpc.insecure_channel(target)


class Load:
    """Client threads that record latencies and failures until stop is set.

    A REST client keeps one connection open for all its requests, or with
    `fresh_rest_connections` opens a new one for each (what a client that does not keep
    connections alive costs the server: an accept and a slot a request).
    """

    def __init__(self, grpc_port: int, rest_port: int, model: str, articles: list[str],
                 credentials: grpc.ChannelCredentials | None = None,
                 fresh_rest_connections: bool = False):
        self.grpc_port, self.rest_port, self.model = grpc_port, rest_port, model
        self.credentials = credentials
        self.fresh_rest_connections = fresh_rest_connections
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
        channel = grpc_channel(self.grpc_port, self.credentials)
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
                reconnect = self.fresh_rest_connections
            except (OSError, http.client.HTTPException) as e:
                self._record(t0, f"REST {type(e).__name__}: {e}")
                reconnect = True
            if reconnect:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.rest_port, timeout=60)
            i += 1
        conn.close()
