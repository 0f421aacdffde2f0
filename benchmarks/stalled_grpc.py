"""Stalled gRPC streams: well-formed Predict clients alone, then beside streams that send their
headers and never a message.

    python -m benchmarks.stalled_grpc --model_base_path runs/quickstart/export/pgn \
        [--clients 16] [--alone_seconds 60] [--attack_seconds 300] [--streams 1000] \
        [--connections 10] [--attacker_from ipv6] \
        [--server_args "--grpc_request_receive_timeout_seconds=30"]

A fresh server process (serving.process) serves the export on loopback. `--clients` gRPC
clients (benchmarks.soak.Load: one channel each, one article a request) run for
--alone_seconds, then for --attack_seconds while `StalledStreams` holds --streams streams over
--connections connections, each sending headers and no message, re-opening every stream the
server ends so that --streams stay open. Prints the well-formed requests, failures and p50/p99
of both phases, the p99 ratio, the streams held and re-opened (with the status the server ended
them with), the server's RSS, the CPU's vector flags, and a JSON line. Bounded in time and in
requests (--max_requests a phase); it only talks to loopback.

The server counts streams by client address (serving.grpc_server: a client over the reading
cap waits behind its own streams), so the attacker must be another client than the
well-formed ones, as it is off this machine: with --attacker_from ipv6 (the default) the server
binds `::` (dual-stack), the well-formed clients dial 127.0.0.1 and the attacker [::1]; with
ipv4 both dial 127.0.0.1 and are one client to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shlex
import threading
import time

import grpc
from grpc import aio

from benchmarks.common import articles_from, emit, percentiles
from benchmarks.load_clients import Load
from pgn_tf.serving.client import summarize
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.utils import procfs

PREDICT = "/tensorflow.serving.PredictionService/Predict"


class StalledStreams:
    """`streams` gRPC calls to `method` over `connections` connections that send headers and
    never a message (a client-streaming call whose request iterator never yields), each
    re-opened as soon as the server ends it, until stop(). Runs on an asyncio loop of its own
    (grpc.aio: a stream costs no thread here either).

    Args:
      target: host:port; streams, connections: how many of each (streams spread evenly);
      credentials: grpc.ChannelCredentials for a TLS server, or None;
      metadata_bytes: padding sent in each stream's headers (what a stalled stream may make
        the server hold; gRPC refuses headers over 8 KiB by default).
    """

    def __init__(self, target: str, streams: int, connections: int = 1,
                 credentials: grpc.ChannelCredentials | None = None, method: str = PREDICT,
                 metadata_bytes: int = 0):
        if streams < 1 or connections < 1:
            raise ValueError("StalledStreams needs at least one stream and one connection")
        self.target, self.streams, self.connections = target, streams, connections
        self.credentials, self.method = credentials, method
        self.metadata = (("x-padding", "p" * metadata_bytes),) if metadata_bytes else ()
        self._lock = threading.Lock()
        self._open = 0
        self._opened = 0
        self._ended: collections.Counter = collections.Counter()
        self.details: dict[str, str] = {}  # the first message the server ended a stream with
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._main: asyncio.Future | None = None

    def start(self) -> StalledStreams:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="stalled-streams")
        self._thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        return self

    def counts(self) -> dict:
        """{"open": streams open now, "opened": all ever opened, "reopened": opened after the
        server ended one, "ended": {status the server ended them with: n}}."""
        with self._lock:
            return {"open": self._open, "opened": self._opened,
                    "reopened": max(0, self._opened - self.streams),
                    "ended": dict(self._ended)}

    def stop(self, timeout: float = 60.0) -> dict:
        """Cancels every stream, closes the connections; returns counts()."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            try:
                self._main.result(timeout)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout)
                self._loop.close()
                self._loop = None
        return self.counts()

    async def _run(self) -> None:
        self._stopping = asyncio.Event()
        # a local subchannel pool each: channels to one target would otherwise share a
        # connection, and the attack would be one connection whatever `connections` says
        options = [("grpc.use_local_subchannel_pool", 1)]
        channels = [aio.secure_channel(self.target, self.credentials, options=options)
                    if self.credentials is not None else
                    aio.insecure_channel(self.target, options=options)
                    for _ in range(self.connections)]
        holders = [asyncio.ensure_future(self._hold(channels[k % self.connections]))
                   for k in range(self.streams)]
        await self._stopping.wait()
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        for c in channels:
            await c.close()

    async def _never(self):
        await self._stopping.wait()
        if False:  # an async generator that ends without yielding, once stop() is called
            yield b""

    async def _hold(self, channel: aio.Channel) -> None:
        call_of = channel.stream_unary(self.method)
        while not self._stopping.is_set():
            call = call_of(self._never(), metadata=self.metadata)
            with self._lock:
                self._open += 1
                self._opened += 1
            code = "OK"
            try:
                await call
            except grpc.RpcError as e:
                code = e.code().name
                self.details.setdefault(code, e.details())
            except asyncio.CancelledError:
                call.cancel()
                raise
            finally:
                with self._lock:
                    self._open -= 1
            with self._lock:
                self._ended[code] += 1


def _phase(load: Load, clients: int, seconds: float, max_requests: int,
           on_tick=None) -> tuple[list[float], list[str], float]:
    """Runs `clients` gRPC clients of `load` for `seconds` or `max_requests` answers."""
    threads = [threading.Thread(target=load.grpc_client, args=(k,), daemon=True)
               for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while time.monotonic() - t0 < seconds:
        with load.lock:
            if len(load.latencies) + len(load.failures) >= max_requests:
                break
        if on_tick is not None:
            on_tick()
        time.sleep(0.5)
    load.stop.set()
    for t in threads:
        t.join(120)
    wall = time.monotonic() - t0
    with load.lock:
        return list(load.latencies), list(load.failures), wall


def measure(model_base_path: str, model_name: str = "pgn", clients: int = 16,
            alone_s: float = 60.0, attack_s: float = 300.0, streams: int = 1000,
            connections: int = 10, warmup_s: float = 10.0, max_requests: int = 10**6,
            server_args: list[str] | None = None, metadata_bytes: int = 0,
            data: str | None = None, attacker_from: str = "ipv6") -> dict:
    """The figures above, for the export at model_base_path served by a fresh process."""
    articles = articles_from(data, 200)
    server_args = list(server_args or [])
    if attacker_from == "ipv6" and "--host" not in server_args:
        server_args = ["--host", "::", *server_args]
    proc, port, _ = start_server(model_base_path, model_name, server_args)
    target = f"127.0.0.1:{port}"
    attacker_target = f"[::1]:{port}" if attacker_from == "ipv6" else target
    attacker = None
    try:
        summarize(target, model_name, articles[:1], timeout=120)
        _phase(Load(port, 0, model_name, articles), clients, warmup_s, max_requests)
        rss_alone = procfs.memory_mb(proc.pid)
        alone, alone_failures, alone_wall = _phase(Load(port, 0, model_name, articles), clients,
                                                   alone_s, max_requests)
        rss_before = procfs.memory_mb(proc.pid)  # idle, as rss_held is
        attacker = StalledStreams(attacker_target, streams, connections,
                                  metadata_bytes=metadata_bytes).start()
        deadline = time.monotonic() + 60
        while attacker.counts()["open"] < streams and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the last streams' headers reach the server
        rss_held = procfs.memory_mb(proc.pid)
        held = []

        def tick() -> None:
            held.append(attacker.counts()["open"])

        attack, attack_failures, attack_wall = _phase(Load(port, 0, model_name, articles),
                                                      clients, attack_s, max_requests, tick)
        rss_attack = procfs.memory_mb(proc.pid)
        counts = attacker.stop()
        attacker = None
        after = summarize(target, model_name, articles[:1], timeout=60)[0]
        alive = proc.poll() is None
    finally:
        if attacker is not None:
            attacker.stop()
        stop_server(proc)
    alone_p, attack_p = percentiles(alone), percentiles(attack)
    ratio = (round(attack_p["p99_ms"] / alone_p["p99_ms"], 2)
             if alone_p["p99_ms"] and attack_p["p99_ms"] else None)
    return {
        "clients": clients, "streams": streams, "connections": connections,
        "attacker_from": attacker_from,
        "metadata_bytes": metadata_bytes, "server_args": " ".join(server_args or []),
        "alone_seconds": round(alone_wall, 1), "alone_requests": len(alone),
        "alone_failures": len(alone_failures),
        "alone_p50_ms": alone_p["p50_ms"], "alone_p99_ms": alone_p["p99_ms"],
        "attack_seconds": round(attack_wall, 1), "attack_requests": len(attack),
        "attack_failures": len(attack_failures),
        "attack_p50_ms": attack_p["p50_ms"], "attack_p99_ms": attack_p["p99_ms"],
        "p99_ratio": ratio, "first_failures": (alone_failures + attack_failures)[:5],
        "streams_held_min": min(held, default=None), "streams_held_max": max(held, default=None),
        "streams_opened": counts["opened"], "streams_reopened": counts["reopened"],
        "streams_ended_by": counts["ended"],
        "rss_alone_mb": rss_alone.get("rss_mb"), "rss_before_streams_mb": rss_before.get("rss_mb"),
        "rss_streams_held_mb": rss_held.get("rss_mb"),
        "rss_per_stream_kb": round((rss_held["rss_mb"] - rss_before["rss_mb"]) * 1024 / streams, 1)
        if rss_held and rss_before else None,
        "rss_end_of_attack_mb": rss_attack.get("rss_mb"),
        "rss_peak_mb": rss_attack.get("peak_rss_mb"),
        "threads_alone": rss_alone.get("threads"), "threads_attack": rss_attack.get("threads"),
        "answered_after": bool(after), "server_alive": alive,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="an export's NAME dir")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--clients", type=int, default=16, help="well-formed gRPC clients")
    p.add_argument("--alone_seconds", type=float, default=60.0)
    p.add_argument("--attack_seconds", type=float, default=300.0)
    p.add_argument("--warmup_seconds", type=float, default=10.0)
    p.add_argument("--streams", type=int, default=1000, help="stalled streams held open")
    p.add_argument("--connections", type=int, default=10, help="connections they use")
    p.add_argument("--metadata_bytes", type=int, default=0,
                   help="padding in each stalled stream's headers")
    p.add_argument("--max_requests", type=int, default=10**6, help="per phase, at most")
    p.add_argument("--server_args", default="", help="more serving.server flags, one string")
    p.add_argument("--data", help="articles (any pgn_tf format); default: synthetic")
    p.add_argument("--attacker_from", choices=("ipv6", "ipv4"), default="ipv6",
                   help="ipv6: the attacker another client ([::1]); ipv4: the clients' own")
    a = p.parse_args()
    emit("stalled_grpc", measure(
        a.model_base_path, a.model_name, a.clients, a.alone_seconds, a.attack_seconds,
        a.streams, a.connections, a.warmup_seconds, a.max_requests,
        shlex.split(a.server_args), a.metadata_bytes, a.data, a.attacker_from))


if __name__ == "__main__":
    main()
