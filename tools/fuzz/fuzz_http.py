"""The REST transport fuzzed (serving.fuzz's `http` campaign): one input is the bytes a client
sends on one connection, fed to the REST server's own waitress channel, parser, tasks and WSGI
application, in this process.

`HttpDriver` builds the server's channel class (rest_transport's, from the running
`Server.http`) over one end of a socketpair, with the real server's Adjustments, and plays the
part of waitress' I/O loop and worker pool synchronously: it writes the input to the other end
a `recv_bytes` chunk at a time and lets the channel read it (`handle_read`) while the channel
says it reads (`readable()`: not after an error answer or a `Connection: close`), runs each
request the channel queued (`service()`: the WSGI task, or the error task of a malformed
request) and flushes what it wrote (`handle_write`), then ends the client's side (EOF) and
reads the rest. One thread, no timing: an input is answered the same way each time, and the
coverage libFuzzer sees is this input's. Only the accept loop and the idle and read-deadline
sweeps (`maintenance`) of the server are not run: they act on time, not on bytes.

`check_exchange` reads the responses, one per request served, and raises `Finding` for what
the server must never send: a status other than the API's and waitress' refusals (a 500 above
all), a response without `X-Content-Type-Options: nosniff` or a Content-Type, a body whose
length is not its Content-Length (a HEAD answer's must be empty), an error that is not
`{"error": "..."}` within serving.status' length or that names the export's path, bytes
outside any response, or nothing at all for a request that was served; and any exception
escaping waitress' channel.

The inputs, their seeds and `HttpMutator` are serving.fuzz_http_requests'.

Importing this module needs no atheris and starts nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import socket

from tools.fuzz.fuzz_harness import Finding
from tools.fuzz.fuzz_loopback import METRICS_PATH, answer_feature, answer_key

# What the REST server may answer: the API's statuses for a client's error (serving.status'
# HTTP_STATUS of its client codes; 429 a full batching queue), waitress' refusals (400
# malformed, 413 body over the cap, 431 headers over theirs, 501 an unknown
# Transfer-Encoding) and the Host check's 421.
ALLOWED_STATUSES = frozenset({200, 400, 404, 412, 413, 421, 429, 431, 501})
_CONTINUE = re.compile(rb"^HTTP/1\.[01] 100 Continue\r\n\r\n")
_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] (\d{3}) [^\r\n]*$")


@dataclasses.dataclass
class Served:
    """A request waitress completed: its method and path as parsed, and the status of
    waitress' own refusal (None: it went to the application)."""

    method: str
    path: str
    error: int | None


@dataclasses.dataclass
class Exchange:
    """One connection: the requests served in order and the bytes written after each
    (`segments`), and bytes written at other times (`between`: only 100 Continue may be)."""

    served: list = dataclasses.field(default_factory=list)
    segments: list = dataclasses.field(default_factory=list)
    between: bytes = b""


class _InlineServer:
    """Where the channel finds its server: the running REST server's attributes (its
    Adjustments, application, connection counting), but tasks are queued for the driver to
    run on this thread instead of on waitress' workers, the I/O loop's wake-up is not needed,
    and the channel is kept out of the real server's sweeps. `application` is the server's,
    wrapped to report the transport stage."""

    def __init__(self, real, application):
        self._real = real
        self.application = application
        self.active_channels: dict = {}
        self.queue: list = []

    def add_task(self, channel) -> None:
        self.queue.append(channel)

    def pull_trigger(self) -> None:
        pass

    def __getattr__(self, name):
        return getattr(self._real, name)


def _drain(sock: socket.socket) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


class HttpDriver:
    """Feeds connections' bytes to the REST server of `server` (a running
    serving.service.Server with REST on); `stages`: a fuzz_loopback.Stages told of each request
    the application receives (None: not counted)."""

    def __init__(self, server, stages=None):
        self.real = server.http
        app = self.real.application
        if stages is not None:
            def application(environ, start_response):
                stages.reached("transport")
                return app(environ, start_response)
        else:
            application = app
        self.inline = _InlineServer(self.real, application)
        self.adj = self.real.adj
        self.channel_class = self.real.channel_class
        self.port = int(self.real.effective_port)
        self._map: dict = {}  # the channels' own: never the real server's I/O loop

    def exchange(self, data: bytes) -> Exchange:
        """Sends `data` on a new connection and closes the client's side; what came back.
        Finding for an exception escaping waitress' channel."""
        ours, theirs = socket.socketpair()
        for s in (ours, theirs):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        theirs.setblocking(False)
        ex = Exchange()
        channel = None
        try:
            channel = self.channel_class(self.inline, ours, ("127.0.0.1", 40000), self.adj,
                                         map=self._map)
            pos = 0
            while True:
                self._serve(channel, theirs, ex)
                if not self._reading(channel) or pos >= len(data):
                    break
                chunk = data[pos:pos + self.adj.recv_bytes]
                pos += len(chunk)
                theirs.sendall(chunk)
                channel.handle_read()
            if self._open(channel):
                theirs.shutdown(socket.SHUT_WR)
                channel.handle_read()  # the end of the stream: waitress closes the channel
            self._serve(channel, theirs, ex)
        except Finding:
            raise
        except Exception as e:  # noqa: BLE001  (whatever escapes waitress is a finding)
            raise Finding(f"waitress' channel raised {type(e).__name__}: {str(e)[:300]}") from e
        finally:
            self.inline.queue.clear()
            if channel is not None and self._open(channel):
                channel.handle_close()
            ex.between += _drain(theirs)
            ours.close()
            theirs.close()
        return ex

    @staticmethod
    def _open(channel) -> bool:
        return bool(channel.connected) and channel.socket is not None and (
            channel.socket.fileno() >= 0)

    def _reading(self, channel) -> bool:
        return self._open(channel) and bool(channel.readable())

    def _pump(self, channel, theirs) -> bytes:
        """What the channel writes until it has nothing left to write (or closes)."""
        out = bytearray()
        for _ in range(100_000):
            if self._open(channel) and channel.writable():
                channel.handle_write()
            got = _drain(theirs)
            out += got
            if not got and not (self._open(channel) and channel.total_outbufs_len):
                break
        return bytes(out)

    def _serve(self, channel, theirs, ex: Exchange) -> None:
        while self.inline.queue:
            ch = self.inline.queue.pop(0)
            request = ch.requests[0]
            error = getattr(request.error, "code", None) if request.error else None
            ex.between += self._pump(channel, theirs)
            ex.served.append(Served(str(getattr(request, "command", "") or ""),
                                    str(getattr(request, "path", "") or ""), error))
            ch.service()
            ex.segments.append(self._pump(channel, theirs))
        ex.between += self._pump(channel, theirs)


# -- the answers -----------------------------------------------------------------------------


@dataclasses.dataclass
class Response:
    status: int
    headers: dict  # lower-cased name -> value (the last one)
    body: bytes


def parse_response(segment: bytes, head_only: bool) -> Response:
    """One response's bytes (100 Continue before or after it dropped) -> Response; Finding
    for bytes that are not one HTTP/1.x response whose body is its Content-Length."""
    while _CONTINUE.match(segment):
        segment = segment[_CONTINUE.match(segment).end():]
    while segment.endswith(b"HTTP/1.1 100 Continue\r\n\r\n"):
        segment = segment[:-len(b"HTTP/1.1 100 Continue\r\n\r\n")]
    end = segment.find(b"\r\n\r\n")
    if end < 0:
        raise Finding(f"a response without the end of its headers: {segment[:200]!r}")
    lines = segment[:end].split(b"\r\n")
    m = _STATUS_LINE.match(lines[0])
    if not m:
        raise Finding(f"a response's status line is {lines[0][:200]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise Finding(f"a response header line without a colon: {line[:200]!r}")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    body = segment[end + 4:]
    length = headers.get("content-length")
    if length is None or not length.isdigit():
        raise Finding(f"a {m.group(1).decode()} response without a Content-Length: {headers}")
    want = 0 if head_only else int(length)
    if len(body) != want:
        raise Finding(f"a {m.group(1).decode()} response's body is {len(body)} bytes, "
                      f"{'a HEAD answer has none' if head_only else 'Content-Length ' + length}")
    return Response(int(m.group(1)), headers, body)


def route_of(path: str) -> str:
    """A request path's route: status, metadata, explain, predict, other verbs, metrics,
    other."""
    path = path.split("?", 1)[0]
    if path == METRICS_PATH:
        return "metrics"
    if not path.startswith("/v1/models/"):
        return "other"
    if ":" in path.rsplit("/", 1)[-1]:
        verb = path.rsplit(":", 1)[1]
        return verb if verb in ("predict", "classify", "regress") else "verb"
    tail = path.rstrip("/").rsplit("/", 1)[-1]
    return tail if tail in ("metadata", "explain") else "status"


_METHODS = frozenset({"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"})


def check_exchange(ex: Exchange, check_message) -> list[str]:
    """The outcome of each request served ("GET status 200", "refused 400"); Finding for an
    answer the server must not give (module docstring). check_message(where, message):
    fuzz_loopback.LoopbackServer.check_message's checks of an error's text."""
    from pgn_tf.serving.status import MAX_ECHO_CHARS, MAX_MESSAGE_CHARS

    rest = _CONTINUE.sub(b"", ex.between)
    while _CONTINUE.match(rest):
        rest = rest[_CONTINUE.match(rest).end():]
    if rest.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b""):
        raise Finding(f"bytes written outside any response: {ex.between[:200]!r}")
    outcomes = []
    for served, segment in zip(ex.served, ex.segments):
        method = served.method.upper() if served.method.upper() in _METHODS else "OTHER"
        where = "refused" if served.error else f"{method} {route_of(served.path)}"
        if not segment:
            raise Finding(f"{where}: a request was served and nothing was written back")
        r = parse_response(segment, head_only=method == "HEAD" and not served.error)
        if r.status not in ALLOWED_STATUSES:
            raise Finding(f"{where}: answered {r.status}: {r.body[:300]!r}")
        if r.headers.get("x-content-type-options", "").lower() != "nosniff":
            raise Finding(f"{where}: a {r.status} response without X-Content-Type-Options: "
                          f"nosniff")
        if not r.headers.get("content-type"):
            raise Finding(f"{where}: a {r.status} response without a Content-Type")
        error = ""
        if r.status != 200 and r.body:
            try:
                error = json.loads(r.body)["error"]
            except (ValueError, KeyError, TypeError):
                raise Finding(f"{where}: a {r.status} body that is not {{\"error\": ...}}: "
                              f"{r.body[:200]!r}") from None
            # waitress' refusals are its reason, then the request quoted (cut)
            check_message(where, error, MAX_MESSAGE_CHARS + MAX_ECHO_CHARS)
        outcomes.append(f"{where} {r.status}")
        answer_feature(answer_key("http", where, r.status, error[:40]))
    return outcomes


# -- the campaign's harness ------------------------------------------------------------------


class HttpHarness:
    """The `http` campaign's target: a LoopbackServer over the stand-in export and an
    HttpDriver on its REST server; `one(data)` answers one connection's bytes."""

    def __init__(self, loopback):
        self.loopback = loopback
        self.driver = HttpDriver(loopback.server, loopback.stages)
        self.counts: collections.Counter = collections.Counter()
        self.port = self.driver.port

    def one(self, data: bytes) -> str:
        self.loopback.start_input()
        try:
            outcomes = check_exchange(self.driver.exchange(data), self.loopback.check_message)
        except Finding:
            self.loopback.abandon_input()
            raise
        self.loopback.end_input("http")
        if not outcomes:
            outcomes = ["no request"]
        for o in outcomes:
            self.counts[f"http {o}"] += 1
        return "; ".join(outcomes)
