"""The `grpc_wire` campaign's HTTP/2 client (serving.fuzz_grpc_wire): writes the stream a Wire
input describes (serving.fuzz_grpc_inputs) frame by frame with h2, a pure-Python HTTP/2 library,
to the gRPC server on loopback, and reads what comes back on it.

A stream goes on a connection of its own, whose HPACK and flow-control state start fresh, unless
`send` is asked to keep it: the harness keeps the connection of an honest stream, and the next
honest stream (past any dishonest ones between, each on a connection of its own) goes on it if
the first one ended cleanly (answered, both sides of the stream closed, no GOAWAY), up to
`streams_per_connection` streams. Such a stream's answer is still its own (each stream has its
id, and nothing of another stream is read as its answer), but its bytes on the wire are not
those of a fresh connection: its headers are HPACK-encoded against the table earlier streams
filled, and its DATA frames are cut to the server's SETTINGS, known by then (window and frame
size), instead of HTTP/2's defaults. An honest stream is answered the same either way; a
dishonest one, which may leave the connection in any state, always has a fresh connection, and
closes it.

Importing this module needs no atheris and starts nothing; h2 is imported where a client is
made (the fuzz and test extras install it).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import select
import socket
import time
import urllib.parse
from collections.abc import Callable

from tools.fuzz.fuzz_grpc_inputs import (
    FRAMING_RESET,
    FRAMING_SPLIT,
    FRAMING_TRAILERS,
    Wire,
    frame,
    request_headers,
)

CODE_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
              "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
              "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
              "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


@dataclasses.dataclass
class Answer:
    """What came back on the stream: the status (a code's name, "RST_STREAM n",
    "GOAWAY n", "closed" or "no answer"), its message, the response body's bytes."""

    status: str = "no answer"
    message: str = ""
    body: bytes = b""
    headers: dict = dataclasses.field(default_factory=dict)


class _HuffmanCodes:
    """hpack's Huffman coder, remembering its codes: the header values a campaign sends come
    from fuzz_grpc_inputs' tables, some of them kilobytes long, and coding those in Python
    again for each stream cost more than the rest of the stream. The bytes sent are the
    same."""

    def __init__(self, coder):
        self.encode = functools.lru_cache(maxsize=1024)(coder.encode)


class _Link:
    """One connection: its socket, its h2 state, the streams sent on it."""

    def __init__(self, sock: socket.socket, conn):
        self.sock = sock
        self.conn = conn
        self.streams = 0


class _Stream:
    """One stream's progress: `done` (answered, reset or the connection ended), `ended` (the
    server ended it), `terminated` (a GOAWAY came), `patient` (it waits the whole answer
    timeout: WireClient.send's patience)."""

    def __init__(self, sid: int):
        self.sid = sid
        self.done = False
        self.ended = False
        self.terminated = False
        self.patient = False


class WireClient:
    """Sends Wire inputs to the gRPC server at 127.0.0.1:`port` whose receive limit is
    `limit` bytes; `answer_timeout_s`: how long a stream may wait for its answer;
    `streams_per_connection`: how many kept streams one connection carries at most (module
    docstring), so that no kept connection lives anywhere near the server's connection age.
    `connections`: how many it opened."""

    def __init__(self, port: int, limit: int, answer_timeout_s: float = 10.0,
                 streams_per_connection: int = 100):
        import h2.config

        self.port = port
        self.limit = limit
        self.answer_timeout_s = answer_timeout_s
        self.streams_per_connection = streams_per_connection
        # the client sends what its input says, malformed headers too
        self.config = h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=False,
            normalize_inbound_headers=False)
        self.connections = 0
        self._kept: _Link | None = None
        self._huffman: _HuffmanCodes | None = None

    def send(self, wire: Wire, wait_s: float | None = None, keep: bool = False,
             patience: Callable[[], bool] | None = None) -> Answer:
        """Sends the stream `wire` describes and reads until it is answered, reset, or the
        connection ends, or `wait_s` (default answer_timeout_s) passed since it was sent, or
        since the server's flow control stopped it: "no answer", unless `patience()` says then
        to wait on, up to answer_timeout_s. keep: the connection stays open for the next kept
        stream if this one ended cleanly (module docstring); otherwise the stream has a new
        connection, closed after it."""
        import h2.exceptions

        link = None
        if keep:  # (a stream not kept leaves the kept connection for the next kept one)
            link = self._kept if self._usable(self._kept) else None
            self._kept = None
        if link is None:
            link = self._connect()
        answer = Answer()
        start = time.monotonic()
        deadline = start + self.answer_timeout_s
        conn = link.conn
        stream = _Stream(conn.get_next_available_stream_id())
        link.streams += 1
        sent_end = False
        try:
            conn.send_headers(stream.sid, request_headers(wire, self.port), end_stream=False)
            out = bytearray(conn.data_to_send())  # sent in as few writes as flow control allows
            data = frame(wire, self.limit)
            rng = random.Random(wire.delta ^ len(data))
            pos = 0
            while pos < len(data) and not stream.done:
                window = min(conn.local_flow_control_window(stream.sid),
                             conn.max_outbound_frame_size)
                if window <= 0 or len(out) >= 1 << 16:
                    link.sock.sendall(out)
                    out.clear()
                    if window <= 0 or select.select([link.sock], [], [], 0)[0]:
                        # a window update, or an answer before the whole message (a length
                        # over the limit): the rest is not sent then
                        blocked = deadline if wait_s is None else min(
                            deadline, time.monotonic() + wait_s)
                        self._wait(link, stream, answer, blocked, patience,
                                   start + self.answer_timeout_s)
                    continue
                n = min(window, len(data) - pos)
                if wire.framing & FRAMING_SPLIT:
                    n = min(n, rng.choice((1, 5, 6, 100, 4096)))
                conn.send_data(stream.sid, data[pos:pos + n])
                pos += n
                out += conn.data_to_send()
            if not stream.done:
                if wire.framing & FRAMING_RESET:
                    conn.reset_stream(stream.sid, 8)  # CANCEL
                    stream.done = True
                    answer.status = "reset by the client"
                elif wire.framing & FRAMING_TRAILERS:
                    conn.send_headers(stream.sid, [(b"x-trailer", b"1")], end_stream=True)
                    sent_end = True
                else:
                    conn.end_stream(stream.sid)
                    sent_end = True
                out += conn.data_to_send()
            link.sock.sendall(out)
            if wait_s is not None:
                deadline = min(deadline, time.monotonic() + wait_s)
            while not stream.done:
                self._wait(link, stream, answer, deadline, patience,
                           start + self.answer_timeout_s)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError,
                BrokenPipeError, ConnectionResetError) as e:
            keep = False
            try:  # what the server said before it closed
                while not stream.done:
                    self._read(link, stream, answer, deadline)
            except (OSError, h2.exceptions.ProtocolError):
                pass
            if answer.status == "no answer":
                answer.status = f"closed ({type(e).__name__})"
        except TimeoutError:
            keep = False
        if (keep and sent_end and stream.ended and not stream.terminated
                and link.streams < self.streams_per_connection):
            self._kept = link
        else:
            self._close(link)
        return answer

    def close(self) -> None:
        """Closes the kept connection, if there is one."""
        if self._kept is not None:
            self._close(self._kept)
            self._kept = None

    def _connect(self) -> _Link:
        import h2.connection
        import h2.settings

        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.answer_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections += 1
        conn = h2.connection.H2Connection(self.config)
        if self._huffman is None:
            self._huffman = _HuffmanCodes(conn.encoder.huffman_coder)
        conn.encoder.huffman_coder = self._huffman
        conn.initiate_connection()  # its bytes go out with the first stream's headers
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        conn.increment_flow_control_window(2**31 - 1 - 65535)
        return _Link(sock, conn)

    def _usable(self, link: _Link | None) -> bool:
        """Whether the kept connection can carry another stream: what the server sent on it
        since its last stream (a GOAWAY, a PING, the acknowledgement of a SETTINGS) is read
        first; one that ended, or that says it will, is closed."""
        import h2.events
        import h2.exceptions

        if link is None:
            return False
        try:
            while select.select([link.sock], [], [], 0)[0]:
                data = link.sock.recv(1 << 20)
                if not data or any(isinstance(ev, h2.events.ConnectionTerminated)
                                   for ev in link.conn.receive_data(data)):
                    raise ConnectionResetError
                out = link.conn.data_to_send()
                if out:
                    link.sock.sendall(out)
        except (OSError, h2.exceptions.ProtocolError):
            self._close(link)
            return False
        return True

    @staticmethod
    def _close(link: _Link) -> None:
        try:
            link.conn.close_connection()
            link.sock.sendall(link.conn.data_to_send())
        except Exception:  # noqa: BLE001  (the connection is gone already)
            pass
        link.sock.close()

    def _wait(self, link: _Link, stream: _Stream, answer: Answer, deadline: float,
              patience: Callable[[], bool] | None, last: float) -> None:
        """One read by `deadline`, or by `last` once patience() said to wait on; TimeoutError
        past them."""
        try:
            self._read(link, stream, answer, last if stream.patient else deadline)
        except TimeoutError:
            if stream.patient or patience is None or not patience():
                raise
            stream.patient = True
            self._read(link, stream, answer, last)

    @staticmethod
    def _read(link: _Link, stream: _Stream, answer: Answer, deadline: float) -> None:
        import h2.events

        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        link.sock.settimeout(left)
        try:
            data = link.sock.recv(1 << 20)
        except TimeoutError:
            raise
        except OSError:
            data = b""
        if not data:
            stream.done = True
            if answer.status == "no answer":
                answer.status = "closed"
            return
        for ev in link.conn.receive_data(data):
            mine = getattr(ev, "stream_id", None) == stream.sid
            if isinstance(ev, h2.events.DataReceived):
                link.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if mine:
                    answer.body += ev.data
            elif isinstance(ev, (h2.events.ResponseReceived,
                                 h2.events.TrailersReceived)) and mine:
                answer.headers.update({k.decode("latin-1"): v.decode("latin-1")
                                       for k, v in ev.headers})
                code = answer.headers.get("grpc-status")
                if code is not None:
                    answer.status = (CODE_NAMES[int(code)] if code.isdigit()
                                     and int(code) < len(CODE_NAMES) else f"grpc-status {code}")
                    answer.message = urllib.parse.unquote(answer.headers.get("grpc-message", ""))
            elif isinstance(ev, h2.events.StreamEnded) and mine:
                stream.done = stream.ended = True
            elif isinstance(ev, h2.events.StreamReset) and mine:
                stream.done = True
                if answer.status == "no answer":
                    answer.status = f"RST_STREAM {int(ev.error_code)}"
            elif isinstance(ev, h2.events.ConnectionTerminated):
                stream.done = stream.terminated = True
                if answer.status == "no answer":
                    answer.status = f"GOAWAY {int(ev.error_code)}"
        out = link.conn.data_to_send()
        if out:
            link.sock.sendall(out)
