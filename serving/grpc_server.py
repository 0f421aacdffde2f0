"""The gRPC server on grpc.aio, so that no stalled client can hold a thread.

grpcio's synchronous server gives a unary call a pool thread as soon as its headers arrive, and
the thread then waits for the request message. 32 streams on one connection that send headers
and never a message held all 32 threads of `--grpc_max_threads`, and every real Predict got
DEADLINE_EXCEEDED until the attacker hung up. Here:

* **A stalled stream holds no thread.** One asyncio loop (`_io_loop`, a daemon thread shared by
  every GrpcServer of the process) runs the grpc.aio server. Each method is registered at the
  wire level as stream-unary: a stock unary client's call is the same HTTP/2 stream (headers,
  one message, end of stream), so clients see no difference, but the handler reads the message
  itself (`context.read()`), under the receive deadline (`receive_timeout_s`): a stream whose
  message has not arrived by then is ended with DEADLINE_EXCEEDED, the code a client already
  retries on and the one TF Serving's REST side answers a request that took too long with (504).
* **Only requests whose message arrived count towards the cap.** At most `max_concurrent_rpcs`
  of them are in progress or waiting for a worker; more get RESOURCE_EXHAUSTED at once, as
  before. grpc.aio's own `maximum_concurrent_rpcs` is not used: it counts a stream from its
  headers, so stalled streams would fill it.
* **Streams still waiting for their message are capped too** (`max_awaiting`): each holds
  gRPC's and this module's state for it (docs/reliability.md measures it), its headers (at most
  16 KiB, gRPC's metadata limit) and what it sent of its message so far (at most the receive
  limit), and connections are not capped, so their number is. Past the cap the stream that has
  waited longest is ended (RESOURCE_EXHAUSTED): a real request's message arrives within
  milliseconds of its headers, so it is never the oldest.
* The receive deadline of each stream is drawn between 3/4 of `receive_timeout_s` and all of
  it, so that streams opened together (an attacker's burst) are not all ended, and re-opened,
  in the same instant: each end and re-opening costs the loop a little CPU, and a burst of
  them would delay the real requests queued behind it.
* **Model runs use a bounded pool**: `max_threads` workers run the synchronous handlers of
  `grpc_service.Services` unchanged, through `_WorkerContext`, the part of a
  grpc.ServicerContext they use (time_remaining, add_callback, abort).
* **Connections are bounded by gRPC's channel arguments** (`DEFAULT_CHANNEL_ARGUMENTS`, which
  `--grpc_channel_arguments` overrides as in tensorflow_model_server): streams per connection,
  connection age and its grace, idle connections, and keepalive ping enforcement.

Why one loop for the process: grpc.aio binds its completion-queue poller to the loop that first
used it and forwards other loops' events through it, so a loop that stopped while another
server still ran would leave that server deaf.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import random
import re
import threading
import time
import typing
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc import aio

log = logging.getLogger("serving")

# This server's bounds on what a connection may hold, in gRPC's channel-argument names; each
# can be overridden by --grpc_channel_arguments. Stock gRPC (and so stock TF Serving, which
# sets none of them) leaves streams per connection, connection age and idle time unbounded.
DEFAULT_CHANNEL_ARGUMENTS: dict[str, int] = {
    # streams open at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a
    # client's further streams wait in its own transport until one ends
    "grpc.max_concurrent_streams": 100,
    # a connection is sent GOAWAY after this (gRPC adds +-10% jitter), so no connection, and no
    # stream on it, outlives it by more than the grace below
    "grpc.max_connection_age_ms": 30 * 60 * 1000,
    # streams still open that long after the GOAWAY are cancelled
    "grpc.max_connection_age_grace_ms": 5 * 60 * 1000,
    # a connection with no stream for this long is closed
    "grpc.max_connection_idle_ms": 5 * 60 * 1000,
    # keepalive enforcement: a client pinging more often than this while no data flows earns a
    # strike, and past max_ping_strikes its connection is closed (GOAWAY ENHANCE_YOUR_CALM)
    "grpc.http2.min_ping_interval_without_data_ms": 5 * 60 * 1000,
    "grpc.http2.max_ping_strikes": 2,
    # gRPC binds with SO_REUSEPORT by default: another process of the same user could then bind
    # the same port and be handed a share of the clients' connections (and their requests);
    # off, a port in use is an error at start ("cannot bind gRPC")
    "grpc.so_reuseport": 0,
}
# Arguments that take an integer: a string there would be ignored by gRPC (it logs and falls
# back to its own default, unbounded for most), so it is refused instead.
INTEGER_ARGUMENTS = frozenset(DEFAULT_CHANNEL_ARGUMENTS) | {
    "grpc.max_receive_message_length", "grpc.max_send_message_length",
    "grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms", "grpc.keepalive_permit_without_calls",
    "grpc.http2.max_pings_without_data", "grpc.server_handshake_timeout_ms",
    "grpc.max_metadata_size", "grpc.absolute_max_metadata_size", "grpc.so_reuseport"}
_INT32 = re.compile(r"[+-]?[0-9]+")


def parse_channel_arguments(text: str) -> dict[str, int | str]:
    """`--grpc_channel_arguments` as tensorflow_model_server reads it: comma-separated
    key=value pairs, a value that is a 32-bit integer passed as one, any other as a string.
    ValueError (one line) for a pair without a key or value, a key given twice, or a value
    that gRPC would ignore (see check_channel_arguments)."""
    out: dict[str, int | str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or "=" in value:
            raise ValueError(f"--grpc_channel_arguments: '{item[:80]}' is not key=value "
                             "(e.g. grpc.max_connection_age_ms=2000)")
        if key in out:
            raise ValueError(f"--grpc_channel_arguments: {key[:80]} is given twice")
        out[key] = int(value) if _INT32.fullmatch(value) and -2**31 <= int(value) < 2**31 \
            else value
    return check_channel_arguments(out)


def check_channel_arguments(args: dict) -> dict:
    """args, or ValueError: an argument that takes an integer given something else, a bound
    given a negative number, or a value out of the 32-bit range gRPC's integers take."""
    for key, value in args.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"--grpc_channel_arguments: a key must be a name, got {key!r:.80}")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"--grpc_channel_arguments: {key[:80]} must be an integer or a "
                             f"string, got {type(value).__name__}")
        if isinstance(value, int) and not -2**31 <= value < 2**31:
            raise ValueError(f"--grpc_channel_arguments: {key[:80]}={value} is out of the "
                             "32-bit range of gRPC's integer arguments")
        if key in INTEGER_ARGUMENTS and not isinstance(value, int):
            raise ValueError(f"--grpc_channel_arguments: {key} takes an integer, got "
                             f"'{str(value)[:80]}'")
        if key in DEFAULT_CHANNEL_ARGUMENTS and value < 0:
            raise ValueError(f"--grpc_channel_arguments: {key} must not be negative")
    return args


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _io_loop() -> asyncio.AbstractEventLoop:
    """The process' gRPC event loop, started on first use (a daemon thread, never stopped)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True, name="grpc-io").start()
            _loop = loop
        return _loop


class _Aborted(Exception):
    """A worker's context.abort(): the status is sent from the loop, where aio's abort runs."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(code, details)
        self.code = code
        self.details = details


class _Status(typing.NamedTuple):
    code: grpc.StatusCode
    details: str


def _run(fn, request, context):
    """fn(request, context), or the _Status a context.abort() in it asked for (returned, so
    that no traceback of the worker's frames, which hold the request and its model version,
    outlives the call)."""
    try:
        return fn(request, context)
    except _Aborted as e:
        return _Status(e.code, e.details)


class _WorkerContext:
    """What grpc_service.Services' handlers use of a grpc.ServicerContext, for a worker thread.

    Args:
      deadline: time.monotonic() by which the client wants its answer, or None.
    """

    def __init__(self, deadline: float | None):
        self._deadline = deadline
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = []

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Runs callback when the RPC ends: answered, cancelled or expired. Unlike grpc's (which
        returns False and drops it), an RPC already ended runs it at once: the callback is how
        a run whose client left is stopped (serving.cancel.Call.cancel)."""
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return True
        callback()
        return False

    def abort(self, code: grpc.StatusCode, details: str):
        raise _Aborted(code, details)

    def end(self) -> None:
        """The RPC ended: runs the callbacks, once."""
        with self._lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001  (one failing callback must not skip the others)
                log.exception("gRPC end-of-call callback failed")


class GrpcServer:
    """The gRPC services on grpc.aio behind the bounds above; `stop()` ends it.

    Args:
      methods: {service: {method: (handler(request, context), parse(bytes), serialize(msg))}}
        (grpc_service.method_table); address: host:port (port 0: any free port);
      credentials: grpc.ServerCredentials for TLS, or None for plaintext;
      max_threads: workers running handlers; max_concurrent_rpcs: requests whose message
        arrived, in progress or waiting for a worker, at most; receive_timeout_s: how long a
        stream may take to deliver its request message; max_awaiting: streams waiting for
        their message at most; options: gRPC channel arguments (name, value) of the server.
    """

    def __init__(self, methods: dict, address: str, credentials: grpc.ServerCredentials | None,
                 *, max_threads: int, max_concurrent_rpcs: int, receive_timeout_s: float,
                 max_awaiting: int, options: list[tuple[str, int | str]]):
        self.max_concurrent_rpcs = max_concurrent_rpcs
        self.receive_timeout_s = receive_timeout_s
        self.max_awaiting = max_awaiting
        self._loop = _io_loop()
        self._executor = futures.ThreadPoolExecutor(max_workers=max_threads,
                                                    thread_name_prefix="grpc")
        self._lock = threading.Lock()
        self._in_progress = 0  # requests whose message arrived, until their worker is done
        self._awaiting: collections.OrderedDict[int, _Awaiting] = collections.OrderedDict()
        self._ids = itertools.count()
        self.counts = collections.Counter()  # streams ended by a bound, by reason
        self._server: aio.Server | None = None
        handlers = [grpc.method_handlers_generic_handler(service, {
            name: grpc.stream_unary_rpc_method_handler(
                self._handler(fn), request_deserializer=parse, response_serializer=serialize)
            for name, (fn, parse, serialize) in table.items()})
            for service, table in methods.items()]
        try:
            self.port = self._call(self._start(handlers, address, credentials, options))
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    def _call(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self, handlers, address, credentials, options) -> int:
        # aio.server must be made on the loop that will run it
        server = aio.server(handlers=handlers, options=options)
        try:  # never the insecure port when a certificate is given
            if credentials is not None:
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:  # gRPC's "Failed to bind"
            port = 0
        if port == 0:
            await server.stop(None)
            raise ValueError(f"cannot bind gRPC to {address}")
        await server.start()
        self._server = server
        return port

    def awaiting(self) -> int:
        """Streams whose request message has not arrived yet."""
        return len(self._awaiting)

    def in_progress(self) -> int:
        """Requests whose message arrived, running or waiting for a worker."""
        with self._lock:
            return self._in_progress

    def stop(self, grace: float = 2.0) -> None:
        """Refuses new calls, lets those under way finish for `grace` seconds, then cancels the
        rest (their runs stop: serving.cancel) and frees the port."""
        if self._server is not None:
            self._call(self._server.stop(grace), timeout=grace + 60)
            self._server = None
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- one call ---------------------------------------------------------------------------

    def _handler(self, fn):
        async def handle(request_iterator, context):
            return await self._serve(fn, context)
        return handle

    async def _serve(self, fn, context):
        # What is local here when context.abort() raises stays alive after the call: aio keeps
        # the state of the last call it accepted, its abort exception and that exception's
        # frames with it, until the next call arrives. So no request message is held at an
        # abort, and a worker's abort comes back as a _Status, not as its exception.
        request = await self._receive(context)
        if request is aio.EOF:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                         "the call ended without a request message")
        with self._lock:
            admitted = self._in_progress < self.max_concurrent_rpcs
            if admitted:
                self._in_progress += 1
        if not admitted:
            request = None
            self.counts["over_max_concurrent_rpcs"] += 1
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"{self.max_concurrent_rpcs} requests are in progress or waiting "
                         "for a worker, the server's --grpc_max_concurrent_rpcs; retry "
                         "later")
        left = context.time_remaining()
        worker_context = _WorkerContext(None if left is None else time.monotonic() + left)
        job = self._submit(fn, request, worker_context)
        request = None
        if job is None:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "the server is stopping")
        try:
            outcome = await asyncio.wrap_future(job)  # cancelled with the RPC: a queued job too
        finally:
            worker_context.end()
        job = None
        if isinstance(outcome, _Status):
            await _abort(context, outcome.code, outcome.details)
        return outcome

    def _submit(self, fn, request, worker_context) -> futures.Future | None:
        """The job running fn on a worker (None once the pool is shut down); its slot among
        max_concurrent_rpcs is freed when it is done, or dropped before it started."""
        try:
            job = self._executor.submit(_run, fn, request, worker_context)
        except RuntimeError:  # the server is stopping
            self._release()
            return None
        job.add_done_callback(self._release)
        return job

    def _release(self, job=None) -> None:
        with self._lock:
            self._in_progress -= 1

    async def _receive(self, context):
        """The request message, or EOF; ends the call past the receive deadline, or when it is
        the oldest of more than max_awaiting streams waiting for their message."""
        read = asyncio.ensure_future(context.read())
        waiting = _Awaiting(read)
        timer = self._loop.call_later(self.receive_timeout_s * random.uniform(0.75, 1.0),
                                      waiting.end, "receive_timeout")
        key = next(self._ids)
        if len(self._awaiting) >= self.max_awaiting:
            self._awaiting.popitem(last=False)[1].end("evicted_awaiting")
        self._awaiting[key] = waiting
        try:
            return await read
        except asyncio.CancelledError:
            if waiting.reason is None:  # the call itself was cancelled: the client left
                raise
        finally:
            timer.cancel()
            self._awaiting.pop(key, None)
        self.counts[waiting.reason] += 1
        if waiting.reason == "evicted_awaiting":
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"more than {self.max_awaiting} streams were waiting for their "
                         "request message (--grpc_max_streams_awaiting_request) and this "
                         "one had waited longest")
        await _abort(context, grpc.StatusCode.DEADLINE_EXCEEDED,
                     f"the request message did not arrive within "
                     f"{self.receive_timeout_s:g} s of the call's start "
                     "(--grpc_request_receive_timeout_seconds)")


async def _abort(context, code: grpc.StatusCode, details: str):
    """context.abort(code, details), for a call that gRPC may have ended already: it refuses some
    messages itself (a compressed flag without an encoding, gzip that does not inflate, a length
    that lies), sends its own status, and the read returns EOF. The status cannot be sent then,
    so the call ends as a cancelled one does (aio would log the failed send as an error)."""
    try:
        await context.abort(code, details)
    except aio.InternalError:  # ExecuteBatchError: the call is over
        raise asyncio.CancelledError from None


class _Awaiting:
    """A stream's read of its request message, and why it was cut short (None: it was not)."""

    __slots__ = ("read", "reason")

    def __init__(self, read: asyncio.Future):
        self.read = read
        self.reason: str | None = None

    def end(self, reason: str) -> None:
        if self.reason is None and not self.read.done():
            self.reason = reason
            self.read.cancel()
