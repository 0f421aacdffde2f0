"""The REST server's HTTP: waitress, with the bounds on what one connection may hold, serving
serving.rest_service's WSGI application (`make_server`).

waitress does the HTTP: its channels are read and parsed on one asynchronous I/O loop, so idle
or slow connections hold no thread; at most `connection_limit` connections are open, each idle
one is closed after `channel_timeout`. waitress restarts that idle clock on every byte, so a
client sending one byte every few seconds would hold its connection for good, and enough of them
would fill `connection_limit`; two bounds here close that door (`_Server`): a request must be
complete (request line, headers and body) within `request_timeout_s` of its first byte or its
connection is answered 408 and closed, checked every second whatever the client keeps sending;
and one client address (an IPv6 client: its /64) may hold at most `max_connections_per_client`
connections, the excess closed at accept with a 503, so no one address fills the cap. Many
addresses, each within its cap, still can; waitress would then stop accepting and leave every new
connection in the listen backlog until one closes, which such an attacker refills at once. So at
the cap a new connection is accepted and replaces the connection whose unfinished request started
longest ago (answered 408 and closed), or else the one idle between requests longest (closed, as
its idle time-out would); either only once it has lasted `_SHED_GRACE_S` (idle:
`_SHED_IDLE_GRACE_S`), and never one whose request is being served. While none qualifies, new
connections wait in the backlog. A body over `max_request_body_size` (by Content-Length, or as
it arrives when chunked) is answered 413 without being read; a malformed request line, header or
Content-Length (negative, not a number) is answered 400, and so is a request with
both Content-Length and Transfer-Encoding (`_StrictParser`), after which the connection is
closed (RFC 9112 section 6.1: such a request may be smuggling a second one in its body). Only
complete requests reach the application, on a bounded pool of `threads`.

Answers have a deadline too: a client that never reads them (its receive window at zero) leaves
waitress holding what the kernel's send buffer could not take, up to a whole answer (pipelined:
up to `outbuf_high_watermark`, a worker waiting on it), and no idle time-out closes it (reading a
byte now and then is activity; reading none only marks it to close on a write event that a full
send buffer never raises). So output waiting `response_timeout_s` to be sent closes its
connection with a reset (`_StrictChannel.output_since`); at the cap it is shed like the oldest
unfinished request.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask

from pgn_tf.serving import peers
from pgn_tf.serving.rest_service import HARDENED_HEADERS, JSON_CONTENT_TYPE, RestApp, json_body
from pgn_tf.serving.status import echo

log = logging.getLogger("serving")


class _StrictParser(HTTPRequestParser):
    """waitress' request parser, refusing a request that has both Content-Length and
    Transfer-Encoding (waitress would follow Transfer-Encoding and keep the connection open),
    and answering 400 to a target that urllib cannot split (waitress let its ValueError escape:
    no answer, and an error traceback logged for each such request)."""

    def parse_header(self, header_plus):
        try:
            super().parse_header(header_plus)
        except ValueError as e:  # urllib's split of a target such as http://[::1/x
            raise ParsingError(f"malformed request target ({echo(str(e))})") from None
        if self.chunked and "CONTENT_LENGTH" in self.headers:
            # a 400; waitress closes the connection after an error response, dropping whatever
            # was read after this request's headers
            raise ParsingError("a request must not have both Content-Length and "
                               "Transfer-Encoding")


class _JsonErrorTask(ErrorTask):
    """waitress' own refusals, answered before the application sees the request (a malformed
    request 400, a body over the cap 413, headers over theirs 431, an unknown
    Transfer-Encoding 501, a failure 500), in this API's form: `{"error": ...}` quoting the
    request only cut (serving.status.echo), with the hardened headers. The connection is
    closed after it, as waitress does."""

    def execute(self):
        error = self.request.error
        body = json_body({"error": f"{error.reason}: {echo(str(error.body))}"})
        self.status = f"{error.code} {error.reason}"
        self.response_headers.extend([("Content-Type", JSON_CONTENT_TYPE), *HARDENED_HEADERS])
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


def client_key(addr) -> str:
    """The client a connection (its accept() address) is counted against for the per-client
    cap (serving.peers)."""
    try:
        return peers.client_key(addr[0])
    except (TypeError, IndexError, KeyError):
        return str(addr)


def _refusal(status: str, message: str) -> bytes:
    """A whole response written on the I/O loop, without a task: the JSON error form with the
    hardened headers and Connection: close."""
    body = json_body({"error": message})
    head = [f"HTTP/1.1 {status}", f"Content-Type: {JSON_CONTENT_TYPE}",
            f"Content-Length: {len(body)}", "Connection: close",
            *(f"{k}: {v}" for k, v in HARDENED_HEADERS)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _answer_and_close(sock: socket.socket, response: bytes) -> None:
    """Writes `response` if the socket takes it at once (a fresh one always does) and ends the
    sending side, so the client reads it before the end of the stream; never blocks."""
    try:
        sock.send(response)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class _StrictChannel(HTTPChannel):
    """A connection. `request_started` is the time (monotonic) of the first byte of the request
    being read, None between requests: set by the first byte, even a blank line (a client
    sending only blank lines completes empty requests, which must not restart the clock), and
    cleared when a complete request goes to a worker; `_Server.maintenance` times it out.

    `output_since`: the time (monotonic) since which output has waited in waitress' buffers, None
    while they are empty, kept by the `total_outbufs_len` setter that every path writing, sending
    or dropping output goes through. Bytes sent meanwhile do not restart it, only empty buffers
    stop it: the response-write deadline counts from when the client fell behind, so one reading
    a byte every few seconds gets no longer than one reading none (a minimum drain rate instead
    would let a client reading at just that rate hold its output for size / rate, and would have
    to suit every link). An honest client must take an answer at about its size / the deadline."""

    parser_class = _StrictParser
    error_task_class = _JsonErrorTask
    request_started: float | None = None
    output_since: float | None = None
    _outbufs_len = 0
    _counted = False

    @property
    def total_outbufs_len(self) -> int:  # waitress' count of the bytes waiting to be sent
        return self._outbufs_len

    @total_outbufs_len.setter
    def total_outbufs_len(self, n: int) -> None:
        if not n:
            self.output_since = None
        elif self.output_since is None:
            self.output_since = time.monotonic()
        self._outbufs_len = n

    def __init__(self, server, sock, addr, adj, map=None):
        self.client = client_key(addr)
        super().__init__(server, sock, addr, adj, map=map)
        server.connection_opened(self.client)
        self._counted = True

    def received(self, data):
        if data and self.request_started is None:
            self.request_started = time.monotonic()
        return super().received(data)

    def service(self):
        # A request is complete: its clock stops while it runs; a partial one read behind it
        # (pipelined) starts its own when this one has been answered. Runs on a worker thread;
        # the I/O loop reads no more of this connection until the request is popped, and once it
        # is, a first byte read there sets the clock itself (so it is never cleared here).
        self.request_started = None
        super().service()
        if self.request is not None:
            self.request_started = time.monotonic()

    def time_out_request(self, timeout_s: float) -> None:
        """On the I/O loop: the request is not complete in time; 408 where nothing else is being
        written, then close."""
        self._answer_408(f"the request was not complete within {timeout_s:g} s of its first "
                         "byte (--rest_api_request_read_timeout_seconds)")
        self.will_close = True

    def abort(self) -> None:
        """On the I/O loop (output past its deadline, or shed): closes with a reset (SO_LINGER
        0), dropping the output in waitress' buffers and the kernel's, which a plain close would
        leave the kernel probing a shut window with for minutes. A worker blocked on the output
        (past `outbuf_high_watermark`) is woken and told the client has gone."""
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.handle_close()

    def shed(self, max_connections: int) -> None:
        """On the I/O loop, no request of this connection being served: closes it now to make
        room for a new one (`_Server.handle_accept`). Output the client is not taking is dropped
        with a reset, as at its deadline; an unfinished request is answered 408, as at its
        deadline; a connection between requests closes silently, as at its idle time-out (a
        client must be ready for that on an idle keep-alive connection)."""
        if self.output_since is not None:
            self.abort()
            return
        if self.request_started is not None:
            age = time.monotonic() - self.request_started
            self._answer_408(
                f"the server holds its --rest_api_max_connections={max_connections} open "
                f"connections and this request, unfinished {age:.0f} s after its first byte, "
                "was the oldest: its connection was closed to make room for a new one")
        self.handle_close()

    def _answer_408(self, message: str) -> None:
        if not self.total_outbufs_len:  # else a response is part-written: only close
            _answer_and_close(self.socket, _refusal("408 Request Timeout", message))

    def del_channel(self, map=None):
        super().del_channel(map)
        if self._counted:
            self._counted = False
            self.server.connection_closed(self.client)


# Connections accepted per wake-up of the listening socket: a burst (a flood refused by the
# per-client cap) is drained without a pass of the I/O loop over every open channel each.
_ACCEPTS_PER_WAKE = 64
# waitress counts its own listening socket and wake-up pipe among the connections it limits.
_OWN_SOCKETS = 2
# How long a connection's unfinished request must have lasted before a new connection may shed
# it at the cap. It caps how fast the slots can turn over (connection cap / grace a second), and
# where an attacker reconnects about that fast the backlog grows and a real client waits behind
# it (benchmarks.trickle_rest showed that at 1 s with 200 slots), so it is short: a real request
# on loopback or a LAN arrives within milliseconds of its first byte, and is shed only as the
# oldest anyway; the grace keeps a burst of new connections from shedding ones just accepted.
_SHED_GRACE_S = 0.1
# A connection idle between requests, longer: a keep-alive client sends its next request at
# will, and closing its connection as that request arrives fails the request for it; idle
# connections are shed only where no unfinished request may be.
_SHED_IDLE_GRACE_S = 1.0


class _Server(TcpWSGIServer):
    """waitress' TCP server with the bounds a trickling client meets (module docstring): the
    request and response-write deadlines, checked in `maintenance` (waitress runs it every
    `cleanup_interval`, here 1 s, beside its own idle check), the per-client cap, checked at
    accept, and shedding at the connection cap (`handle_accept`): many addresses, each within
    its cap, can still fill `connection_limit`, and waitress would then stop accepting, leaving
    every new connection in the listen backlog until one closes."""

    channel_class = _StrictChannel

    def __init__(self, app, adj: Adjustments, socket_map: dict, request_timeout_s: float,
                 max_connections_per_client: int, response_timeout_s: float):
        self.request_timeout_s = request_timeout_s
        self.response_timeout_s = response_timeout_s
        self.max_connections_per_client = max_connections_per_client
        self._per_client: dict[str, int] = {}
        self._count_lock = threading.Lock()  # channels close on the I/O loop and in stop()
        self.refused_connections = 0  # by the per-client cap
        self.timed_out_requests = 0
        self.timed_out_responses = 0  # closed at the response-write deadline
        self.shed_connections = 0  # closed at the connection cap to make room, idle ones too
        self.shed_idle_connections = 0  # of those, the ones between requests
        self.shed_stuck_connections = 0  # and the ones whose output the client was not taking
        self.max_connections = adj.connection_limit - _OWN_SOCKETS
        self._next_shed_check = 0.0  # monotonic: at the cap, listen again from then
        self._accept_error_logged = self._full_logged = self._write_timeout_logged = 0.0
        super().__init__(app, map=socket_map, adj=adj, _sock=_dual_stack_socket(adj))

    def connection_opened(self, client: str) -> None:
        with self._count_lock:
            self._per_client[client] = self._per_client.get(client, 0) + 1

    def connection_closed(self, client: str) -> None:
        with self._count_lock:
            n = self._per_client.pop(client, 0) - 1
            if n > 0:
                self._per_client[client] = n

    def connections_of(self, client: str) -> int:
        with self._count_lock:
            return self._per_client.get(client, 0)

    def readable(self):
        """waitress' own, but at the connection cap the listening socket is still polled while
        a connection could be shed (`handle_accept`), so a new connection is seen; when none
        could, not until `_next_shed_check`, so a waiting connection does not spin the loop."""
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        return (len(self._map) < self.adj.connection_limit
                or time.monotonic() >= self._next_shed_check)

    def shed_candidate(self) -> _StrictChannel | None:
        """The connection a new one may replace at the cap, or None (then `_next_shed_check`
        says when to look again): the one whose unfinished request started longest ago, or
        whose output has waited for the client longest (`output_since`), at least
        `_SHED_GRACE_S` ago; else the one idle between requests longest, at least
        `_SHED_IDLE_GRACE_S`. Never one with a request queued or being served, nor one already
        closing with nothing left to send (output waiting makes one a candidate even when
        marked to close: waitress closes it only once the client takes it). One pass over the
        open connections."""
        now, wall = time.monotonic(), time.time()
        oldest = idlest = None  # (started, channel), (last activity, channel)
        for channel in self.active_channels.values():
            if channel.requests:
                continue
            started = channel.output_since
            if started is None:
                if channel.will_close or channel.close_when_flushed:
                    continue
                started = channel.request_started
            if started is not None:
                if oldest is None or started < oldest[0]:
                    oldest = (started, channel)
            elif not channel.total_outbufs_len and (
                    idlest is None or channel.last_activity < idlest[0]):
                idlest = (channel.last_activity, channel)
        if oldest is not None and oldest[0] <= now - _SHED_GRACE_S:
            return oldest[1]
        if idlest is not None and idlest[0] <= wall - _SHED_IDLE_GRACE_S:
            return idlest[1]
        wake = now + _SHED_IDLE_GRACE_S  # none yet: when the oldest of a kind is old enough
        if oldest is not None:
            wake = min(wake, oldest[0] + _SHED_GRACE_S)
        if idlest is not None:
            wake = min(wake, now + idlest[0] + _SHED_IDLE_GRACE_S - wall)
        self._next_shed_check = wake
        return None

    def _log_full(self) -> None:
        if time.monotonic() - self._full_logged > 60:
            self._full_logged = time.monotonic()
            log.warning("REST connections are at --rest_api_max_connections=%d: each new one "
                        "closes the oldest unfinished request or unread answer over %g s old "
                        "(or idle connection over %g s), %d so far, or waits in the listen "
                        "backlog while there is none", self.max_connections, _SHED_GRACE_S,
                        _SHED_IDLE_GRACE_S, self.shed_connections)

    def handle_accept(self):
        victim = None  # at the cap: the connection the next accepted one replaces
        for _ in range(_ACCEPTS_PER_WAKE):
            if victim is None and len(self._map) >= self.adj.connection_limit:
                self._log_full()
                victim = self.shed_candidate()
                if victim is None:
                    return  # readable() listens again at _next_shed_check
            try:
                pair = self.accept()
            except OSError as e:  # out of file descriptors, most likely: say so, rarely
                if time.monotonic() - self._accept_error_logged > 60:
                    self._accept_error_logged = time.monotonic()
                    log.warning("REST accept failed: %s (raise the open-file limit, or lower "
                                "--rest_api_max_connections)", e)
                return
            if pair is None:
                return
            conn, addr = pair
            client = client_key(addr)
            if self.connections_of(client) >= self.max_connections_per_client:
                self.refused_connections += 1
                conn.setblocking(False)
                _answer_and_close(conn, _refusal(
                    "503 Service Unavailable",
                    f"{client} already holds {self.max_connections_per_client} open connections, "
                    "the server's --rest_api_max_connections_per_client; reuse or close one"))
                conn.close()
                continue  # refused without shedding: an address at its cap sheds nobody
            if victim is not None:
                self.shed_connections += 1
                stuck = victim.output_since is not None
                self.shed_stuck_connections += stuck
                self.shed_idle_connections += not stuck and victim.request_started is None
                victim.shed(self.max_connections)  # closed now: its slot is free
            try:
                self.set_socket_options(conn)
                self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)
            except OSError:  # the client left before its connection was set up
                conn.close()
            if victim is not None:
                # the next accept could reuse the shed socket's number, which this pass of the
                # I/O loop may still report events of: accept again on the next pass
                return

    def maintenance(self, now):
        """waitress' idle check, then the deadlines. waitress only marks a connection to close
        (`will_close`), acted on at its next write event, which one whose client stopped reading
        may never have: closed here, nothing of it being served. Output past the write deadline
        goes with its connection even while a request of it is served (whose worker may be the
        one waiting on that output)."""
        super().maintenance(now)  # idle connections (between requests, or before the first)
        mono = time.monotonic()
        read_cutoff, write_cutoff = mono - self.request_timeout_s, mono - self.response_timeout_s
        for channel in list(self.active_channels.values()):
            pending, started = channel.output_since, channel.request_started
            if pending is not None and pending < write_cutoff:
                self.timed_out_responses += 1  # counted and logged first: seen closed, it's done
                self._log_write_timeout()
                channel.abort()
            elif channel.requests:
                continue
            elif channel.will_close:
                channel.handle_close()
            elif (started is not None and started < read_cutoff
                    and not channel.close_when_flushed):
                self.timed_out_requests += 1
                channel.time_out_request(self.request_timeout_s)

    def _log_write_timeout(self) -> None:
        if time.monotonic() - self._write_timeout_logged > 60:  # a flood logs once a minute
            self._write_timeout_logged = time.monotonic()
            log.warning("closing a REST connection whose answer has not drained to the client "
                        "within %g s (--rest_api_response_write_timeout_seconds), %d so far",
                        self.response_timeout_s, self.timed_out_responses)


def _dual_stack_socket(adj: Adjustments) -> socket.socket | None:
    """For --host ::, a socket that takes IPv4 clients too (IPV6_V6ONLY off), as gRPC's "[::]"
    does, so one --host means the same on both ports; waitress would make it IPv6 only."""
    family, socktype, _, sockaddr = adj.listen[0]
    if family != socket.AF_INET6 or sockaddr[0] != "::":
        return None
    sock = socket.socket(family, socktype)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    return sock


def make_server(app: RestApp, host: str, port: int, threads: int, connection_limit: int,
                channel_timeout_s: float, max_body_bytes: int, socket_map: dict, *,
                request_timeout_s: float, max_connections_per_client: int,
                response_timeout_s: float):
    """A waitress server for `app` (not started: call .run() on a thread). Its I/O loop runs
    while `socket_map` holds channels: `waitress.wasyncore.close_all(socket_map)` ends it.

    Args:
      connection_limit: open connections at most (--rest_api_max_connections);
      channel_timeout_s: an idle connection's life (--rest_api_idle_timeout_seconds);
      request_timeout_s: a request's, from its first byte until it is complete
      (--rest_api_request_read_timeout_seconds); max_connections_per_client: open connections
      of one client address (--rest_api_max_connections_per_client); response_timeout_s: how
      long output may wait for a client that does not take it
      (--rest_api_response_write_timeout_seconds).
    """
    adj = Adjustments(
        host=host, port=port, threads=threads,
        connection_limit=connection_limit + _OWN_SOCKETS,
        channel_timeout=max(1, round(channel_timeout_s)),
        cleanup_interval=1,  # how often idle connections and late requests, answers close
        max_request_body_size=max_body_bytes + 1,  # waitress refuses at >= the limit
        max_request_header_size=64 * 1024, asyncore_use_poll=True,  # poll: no 1,024-fd limit
        backlog=2048, expose_tracebacks=False, ident="pgn_tf-serving")
    return _Server(app, adj, socket_map, request_timeout_s, max_connections_per_client,
                   response_timeout_s)
