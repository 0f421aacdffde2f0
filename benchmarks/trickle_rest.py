"""Trickle: well-formed REST clients beside connections that send one byte every few seconds.

    python -m benchmarks.trickle_rest --model_base_path runs/quickstart/export/pgn \
        [--clients 16] [--connections 2000] [--interval 10] [--alone_seconds 60] \
        [--attack_seconds 300] [--source 127.0.0.2] [--sources 1] [--keep_alive] \
        [--server_arg=--rest_api_...=N ...]

A fresh server process (serving.process) serves the export's newest version on loopback. --clients
REST clients (benchmarks.soak's `Load.rest_client`: one article a request to :predict, each on a
connection of its own unless --keep_alive, since a client that keeps its connection is never
refused a slot: the finding was that new connections could not get one) run alone for
--alone_seconds, then for --attack_seconds beside a `Trickler`: --connections connections from
--sources loopback addresses (--source and the ones after it: 127.0.0.2, 127.0.0.3, ...; each
holds an even share, so that many addresses within --rest_api_max_connections_per_client can
fill --rest_api_max_connections), each sending one byte of a request that never ends every
--interval seconds and re-opened at its next byte's time whenever the server closes it, so that
many are always attempted. waitress restarts its idle clock on every byte, so before the request
deadline, the per-client cap and shedding at the connection cap such connections held every slot
of --rest_api_max_connections and every well-formed request timed out. Prints the well-formed
requests and failures, p50/p99 alone and under attack and their p99 ratio, what became of the
attacker's connections (open, refused at accept with 503, timed out with 408, shed at the
connection cap with 408, closed otherwise), the server's RSS, the CPU's vector flags, and a JSON
line. Bounded in time (each phase) and count (the connections); it only talks to 127.0.0.1 and
the attacker's loopback addresses.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import ipaddress
import os
import resource
import selectors
import socket
import threading
import time
from collections.abc import Sequence

from benchmarks.common import articles_from, emit, percentiles
from benchmarks.load_clients import Load
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.utils import procfs
from pgn_tf.utils.machine import vector_flags

# What a trickling connection sends by default: a request line, then header lines without end.
REQUEST_LINE = b"GET /v1/models/default HTTP/1.1\r\n"
HEADER_FILLER = b"X-Trickle: a\r\n"
# In the 408 of a connection shed at the server's connection cap (the request deadline's differs).
SHED_MARK = b"to make room"


class Trickler:
    """`connections` connections to 127.0.0.1:`port` from `source` (an address, or several:
    connection i from the (i mod n)-th, so each holds an even share), on one thread: each sends
    `head` whole once connected, then one byte every `interval_s` seconds, first those of
    `lead`, then those of `filler` over and over. The connections' bytes are spread evenly
    over the interval. A connection the server closes is counted by what it answered (503:
    refused at accept, 408: timed out or shed, else closed) and, with `reopen`, opened again at its
    next byte's time, so `connections` are always attempted.

    Usable as a context manager; `counts()` may be read while it runs.
    """

    def __init__(self, port: int, connections: int, interval_s: float,
                 source: str | Sequence[str] = "127.0.0.2", lead: bytes = REQUEST_LINE,
                 filler: bytes = HEADER_FILLER, head: bytes = b"", reopen: bool = True):
        if connections <= 0 or interval_s <= 0 or not filler:
            raise ValueError("a Trickler needs connections > 0, interval_s > 0 and a filler")
        self.sources = [source] if isinstance(source, str) else list(source)
        if not self.sources:
            raise ValueError("a Trickler needs at least one source address")
        self.port, self.connections, self.interval_s = port, connections, interval_s
        self.lead, self.filler, self.head = lead, filler, head
        self.reopen = reopen
        self._lock = threading.Lock()
        self._counts = {"opened": 0, "refused": 0, "timed_out": 0, "shed": 0,
                        "closed_other": 0, "connect_failed": 0, "bytes_sent": 0}
        self.answers: dict[str, bytes] = {}  # the first answer of each status line, cut
        self._slots: list[dict | None] = [None] * connections
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._selector = selectors.DefaultSelector()

    # -- the public side -------------------------------------------------------------------

    def start(self) -> Trickler:
        self._thread = threading.Thread(target=self._run, daemon=True, name="trickler")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for i in range(self.connections):
            self._drop(i)
        self._selector.close()

    def __enter__(self) -> Trickler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def counts(self) -> dict[str, int]:
        """opened (connections established so far), open and connecting (now), refused (503),
        timed_out (408 at the request deadline), shed (408 at the connection cap), closed_other
        (closed with any other answer or none), connect_failed, bytes_sent, attempted
        (`connections`)."""
        with self._lock:
            out = dict(self._counts)
            slots = [s for s in self._slots if s is not None]
        out["open"] = sum(1 for s in slots if s["connected"])
        out["connecting"] = len(slots) - out["open"]
        out["attempted"] = self.connections
        return out

    # -- the loop --------------------------------------------------------------------------

    def _add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _byte(self, slot: dict) -> bytes:
        i = slot["sent"]
        if i < len(self.lead):
            return self.lead[i:i + 1]
        j = (i - len(self.lead)) % len(self.filler)
        return self.filler[j:j + 1]

    def _open(self, i: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((self.sources[i % len(self.sources)], 0))
            sock.setblocking(False)
            err = sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            self._add("connect_failed")
            return
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self._add("connect_failed")
            return
        slot = {"sock": sock, "connected": False, "sent": 0, "got": b""}
        with self._lock:
            self._slots[i] = slot
        self._selector.register(sock, selectors.EVENT_WRITE, i)

    def _drop(self, i: int) -> None:
        with self._lock:
            slot, self._slots[i] = self._slots[i], None
        if slot is None:
            return
        try:
            self._selector.unregister(slot["sock"])
        except (KeyError, ValueError, OSError):
            pass
        slot["sock"].close()

    def _closed(self, i: int) -> None:
        """The server closed connection i: count it by its answer."""
        slot = self._slots[i]
        got = slot["got"]
        status = got.split(b"\r\n", 1)[0]
        if got:
            with self._lock:
                self.answers.setdefault(status.decode("latin-1")[:40], got[:600])
        key = ("shed" if status.startswith(b"HTTP/1.1 408") and SHED_MARK in got else
               "timed_out" if status.startswith(b"HTTP/1.1 408") else
               "refused" if status.startswith(b"HTTP/1.1 503") else "closed_other")
        self._add(key)
        self._drop(i)

    def _send(self, i: int, data: bytes, trickled: bool = True) -> None:
        """Sends `data` on connection i; `trickled`: it is the next byte of the stream."""
        slot = self._slots[i]
        try:
            sent = slot["sock"].send(data)
        except BlockingIOError:
            return
        except OSError:  # reset: whatever it answered is still to be read
            self._read(i, until_closed=True)
            return
        if trickled:
            slot["sent"] += sent
        self._add("bytes_sent", sent)

    def _read(self, i: int, until_closed: bool = False) -> None:
        slot = self._slots[i]
        while slot is not None:
            try:
                data = slot["sock"].recv(4096)
            except BlockingIOError:
                if until_closed:
                    self._closed(i)
                return
            except OSError:
                data = b""
            if not data:
                self._closed(i)
                return
            slot["got"] += data[:4096 - len(slot["got"])]

    def _connected(self, i: int) -> None:
        slot = self._slots[i]
        err = slot["sock"].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._add("connect_failed")
            self._drop(i)
            return
        slot["connected"] = True
        self._add("opened")
        self._selector.modify(slot["sock"], selectors.EVENT_READ, i)
        if self.head:
            self._send(i, self.head, trickled=False)
        if self._slots[i] is not None:
            self._send(i, self._byte(slot))

    def _tick(self, i: int) -> None:
        slot = self._slots[i]
        if slot is None:
            self._open(i)
        elif slot["connected"]:
            self._send(i, self._byte(slot))

    def _run(self) -> None:
        t0 = time.monotonic()
        # each connection's first tick, spread over one interval: (time, index)
        due = [(t0 + self.interval_s * i / self.connections, i) for i in range(self.connections)]
        heapq.heapify(due)
        first = set(range(self.connections))
        while not self._stop.is_set():
            now = time.monotonic()
            while due and due[0][0] <= now:
                t, i = heapq.heappop(due)
                if i in first or self.reopen or self._slots[i] is not None:
                    first.discard(i)
                    self._tick(i)
                    heapq.heappush(due, (t + self.interval_s, i))
            timeout = min(0.5, max(0.0, due[0][0] - now)) if due else 0.5
            if not self._selector.get_map():
                self._stop.wait(timeout)
                continue
            for key, mask in self._selector.select(timeout):
                i = key.data
                if self._slots[i] is None:
                    continue
                if mask & selectors.EVENT_WRITE and not self._slots[i]["connected"]:
                    self._connected(i)
                elif mask & selectors.EVENT_READ:
                    self._read(i)


def source_addresses(first: str, n: int) -> list[str]:
    """`n` consecutive loopback addresses from `first` (Linux routes all of 127.0.0.0/8 to
    loopback); ValueError where one would leave it or be 127.0.0.1, the clients' own."""
    try:
        start = ipaddress.IPv4Address(first)
    except ValueError:
        raise ValueError(f"--source {first!r} is not an IPv4 address") from None
    if n < 1:
        raise ValueError(f"--sources {n}: needs at least 1")
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    out = [start + k for k in range(n)] if int(start) + n - 1 < 2**32 else []
    if not out or any(a not in loopback or str(a) == "127.0.0.1" or a == loopback[-1]
                      for a in out):
        raise ValueError(f"--source {first} with --sources {n} leaves 127.0.0.2 .. "
                         "127.255.255.254 (127.0.0.1 is the clients')")
    return [str(a) for a in out]


def raise_open_file_limit(needed: int) -> int:
    """Raises this process' soft RLIMIT_NOFILE towards `needed` (a server started after it
    inherits it); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    return soft


def _take(load: Load) -> tuple[list[float], list[str]]:
    """The latencies and failures recorded since the last take (then cleared)."""
    with load.lock:
        latencies, failures = list(load.latencies), list(load.failures)
        load.latencies.clear()
        load.failures.clear()
    return latencies, failures


def run(model_base_path: str, model_name: str = "pgn", clients: int = 16,
        connections: int = 2000, interval_s: float = 10.0, alone_s: float = 60.0,
        attack_s: float = 300.0, source: str = "127.0.0.2", data: str | None = None,
        server_args: list[str] | None = None, keep_alive: bool = False,
        sources: int = 1) -> dict:
    """The measurement (module docstring) -> its figures. model_base_path: an export's NAME dir
    (its newest version is served) or a version dir's parent; sources: how many loopback
    addresses, from `source` on, the trickling connections are spread over."""
    addresses = source_addresses(source, sources)
    if not any(d.isascii() and d.isdigit() for d in os.listdir(model_base_path)):
        raise ValueError(f"no version dir (a number) under --model_base_path {model_base_path}")
    fd_limit = raise_open_file_limit(connections + clients + 4096)
    articles = articles_from(data, 200)
    proc, grpc_port, rest_port = start_server(model_base_path, model_name, server_args or [])
    load = Load(grpc_port, rest_port, model_name, articles, fresh_rest_connections=not keep_alive)
    trickler = Trickler(rest_port, connections, interval_s, source=addresses,
                        lead=REQUEST_LINE.replace(b"default", model_name.encode()))
    threads = [threading.Thread(target=load.rest_client, args=(k,), daemon=True)
               for k in range(clients)]
    try:
        for t in threads:
            t.start()
        warm_until = time.monotonic() + 120  # every client's first request answered
        while time.monotonic() < warm_until:
            with load.lock:
                if len(load.latencies) + len(load.failures) >= 2 * clients:
                    break
            time.sleep(0.2)
        _take(load)
        time.sleep(alone_s)
        alone, alone_failures = _take(load)
        rss_alone = procfs.memory_mb(proc.pid)
        trickler.start()
        time.sleep(attack_s)
        attacked, attack_failures = _take(load)
        counts = trickler.counts()
        rss_attack = procfs.memory_mb(proc.pid)
        alive = proc.poll() is None
    finally:
        load.stop.set()
        trickler.stop()
        for t in threads:
            t.join(70)
        stop_server(proc)
    p_alone, p_attack = percentiles(alone), percentiles(attacked)
    ratio = (round(p_attack["p99_ms"] / p_alone["p99_ms"], 3)
             if p_alone["p99_ms"] and p_attack["p99_ms"] else None)
    failures = alone_failures + attack_failures
    return {
        "clients": clients, "connections": connections, "interval_s": interval_s,
        "alone_s": alone_s, "attack_s": attack_s, "sources": addresses,
        "connections_per_source": -(-connections // len(addresses)),
        "requests_alone": len(alone), "requests_attack": len(attacked),
        "failures_alone": len(alone_failures), "failures_attack": len(attack_failures),
        "first_failures": failures[:5],
        "p50_alone_ms": p_alone["p50_ms"], "p99_alone_ms": p_alone["p99_ms"],
        "p50_attack_ms": p_attack["p50_ms"], "p99_attack_ms": p_attack["p99_ms"],
        "p99_ratio": ratio,
        "target_met": not failures and ratio is not None and ratio <= 2.0,
        "attacker": counts, "attacker_answers": sorted(trickler.answers),
        "server_rss_alone_mb": rss_alone["rss_mb"], "server_rss_attack_mb": rss_attack["rss_mb"],
        "server_peak_rss_mb": rss_attack["peak_rss_mb"], "server_threads": rss_attack["threads"],
        "server_alive": alive, "fd_limit": fd_limit, "server_args": server_args or [],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="an export's NAME dir")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--clients", type=int, default=16, help="well-formed REST clients")
    p.add_argument("--connections", type=int, default=2000, help="trickling connections")
    p.add_argument("--interval", type=float, default=10.0,
                   help="seconds between two bytes of one trickling connection")
    p.add_argument("--alone_seconds", type=float, default=60.0)
    p.add_argument("--attack_seconds", type=float, default=300.0)
    p.add_argument("--source", default="127.0.0.2",
                   help="the attacker's first loopback address (the clients use 127.0.0.1)")
    p.add_argument("--sources", type=int, default=1,
                   help="loopback addresses the trickling connections are spread over, from "
                        "--source on")
    p.add_argument("--keep_alive", action="store_true",
                   help="the clients keep their connection (default: a new one a request)")
    p.add_argument("--data", help="articles (any pgn_tf format); default: synthetic")
    p.add_argument("--server_arg", action="append", default=[],
                   help="a flag for the server, e.g. --server_arg=--rest_api_max_connections_"
                        "per_client=50 (repeatable)")
    a = p.parse_args()
    print(f"trickle_rest: {a.clients} clients, alone {a.alone_seconds:g} s, then beside "
          f"{a.connections} connections from {a.sources} address(es) from {a.source} on, "
          f"sending a byte every {a.interval:g} s for {a.attack_seconds:g} s; "
          f"cpu {vector_flags()}", flush=True)
    try:
        result = run(a.model_base_path, a.model_name, a.clients, a.connections, a.interval,
                     a.alone_seconds, a.attack_seconds, a.source, a.data, a.server_arg,
                     keep_alive=a.keep_alive, sources=a.sources)
    except (ValueError, OSError, RuntimeError) as e:
        raise SystemExit(f"trickle_rest: error: {e}") from None
    emit("trickle_rest", result)


if __name__ == "__main__":
    main()
