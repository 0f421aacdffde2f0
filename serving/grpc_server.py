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
  message has not arrived by then is ended with DEADLINE_EXCEEDED, the code TF Serving's REST
  side answers a request that took too long with (504). The message arrives as bytes and is
  parsed on the worker that runs it, so no parse of a large request stalls the loop.
* **Only requests whose message arrived count towards the cap.** At most `max_concurrent_rpcs`
  of them are in progress or waiting for a worker; more get RESOURCE_EXHAUSTED at once, as
  before. grpc.aio's own `maximum_concurrent_rpcs` is not used: it counts a stream from its
  headers, so stalled streams would fill it.
* **What waiting streams hold is bounded by a memory budget.** A stream whose read is posted
  is granted its whole message's window by gRPC, so it may hold up to the receive limit of
  message sent so far and never finished. Only `max_reading` streams read at once (the budget,
  `--grpc_awaiting_message_memory_mb`, over the receive limit); the others are parked, with no
  read posted, so gRPC grants them no more than the 64 KiB of `grpc.http2.lookahead_bytes`
  (with bandwidth probing off, which would grow it). `_receive` says who reads and who waits:
  one client over the cap waits behind its own streams, another client's request takes the
  place of the hog's oldest. A client is an address (an IPv6 one: its /64, serving.peers).
* **Streams waiting at all are capped too** (`max_awaiting`): connections are capped
  (`grpc.max_allowed_incoming_connections`) but hold 100 streams each, and each parked stream
  still holds its headers (at most 16 KiB, gRPC's metadata limit), its window and the state
  `benchmarks/stalled_grpc.py` reports. Past the cap the oldest parked stream, or the oldest
  if none is parked, is ended (RESOURCE_EXHAUSTED). A real request's message arrives within
  milliseconds of its headers, so it is reached only when the cap is filled faster than that.
* The receive deadline of each stream is drawn between 3/4 of `receive_timeout_s` and all of
  it, so that streams opened together (an attacker's burst) are not all ended, and re-opened,
  in the same instant: each end and re-opening costs the loop a little CPU, and a burst of
  them would delay the real requests queued behind it.
* **Model runs use a bounded pool**: `max_threads` workers run the synchronous handlers of
  `grpc_service.Services` unchanged, through `_WorkerContext`, the part of a
  grpc.ServicerContext they use (time_remaining, add_callback, abort).
* **Connections are bounded by gRPC's channel arguments** (`DEFAULT_CHANNEL_ARGUMENTS`, which
  `--grpc_channel_arguments` overrides as in tensorflow_model_server): connections at once,
  handshake time, streams per connection, connection age and its grace, idle connections, and
  keepalive ping enforcement.

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
import threading
import time
import typing
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc import aio

from pgn_tf.serving import peers

log = logging.getLogger("serving")

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


def _run(fn, parse, data: bytes, context):
    """fn(parse(data), context), or the _Status a context.abort() in it asked for (returned,
    so that no traceback of the worker's frames, which hold the request and its model
    version, outlives the call)."""
    try:
        return fn(parse(data), context)
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
        their message at most, reading or parked; max_reading: streams whose read is posted
        at most (each may hold up to the receive limit); options: gRPC channel arguments
        (name, value) of the server.
    """

    def __init__(self, methods: dict, address: str, credentials: grpc.ServerCredentials | None,
                 *, max_threads: int, max_concurrent_rpcs: int, receive_timeout_s: float,
                 max_awaiting: int, max_reading: int, options: list[tuple[str, int | str]]):
        self.max_concurrent_rpcs = max_concurrent_rpcs
        self.receive_timeout_s = receive_timeout_s
        self.max_awaiting = max_awaiting
        self.max_reading = min(max_reading, max_awaiting)
        self.options = list(options)
        self._loop = _io_loop()
        self._executor = futures.ThreadPoolExecutor(max_workers=max_threads,
                                                    thread_name_prefix="grpc")
        self._lock = threading.Lock()
        self._in_progress = 0  # requests whose message arrived, until their worker is done
        # streams waiting for their message, oldest first; those parked; those reading, by
        # client (touched on the loop thread only)
        self._awaiting: collections.OrderedDict[int, _Awaiting] = collections.OrderedDict()
        self._parked: collections.OrderedDict[int, _Awaiting] = collections.OrderedDict()
        self._reading: dict[str, collections.OrderedDict[int, _Awaiting]] = {}
        self._n_reading = 0
        self._ids = itertools.count()
        self.counts = collections.Counter()  # streams ended by a bound, by reason
        self._server: aio.Server | None = None
        # registered without a deserializer: the message's bytes are parsed on the worker,
        # so no request's parse (up to the receive limit) stalls the loop every call shares
        handlers = [grpc.method_handlers_generic_handler(service, {
            name: grpc.stream_unary_rpc_method_handler(
                self._handler(fn, parse), response_serializer=serialize)
            for name, (fn, parse, serialize) in table.items()})
            for service, table in methods.items()]
        try:
            self.port = self._call(self._start(handlers, address, credentials, self.options))
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
        """Streams whose request message has not arrived yet, reading or parked."""
        return len(self._awaiting)

    def reading(self) -> int:
        """Streams waiting for their message with a read posted."""
        return self._n_reading

    def parked(self) -> int:
        """Streams waiting for a read to be posted for them."""
        return len(self._parked)

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

    def _handler(self, fn, parse):
        async def handle(request_iterator, context):
            return await self._serve(fn, parse, context)
        return handle

    async def _serve(self, fn, parse, context):
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
        job = self._submit(fn, parse, request, worker_context)
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

    def _submit(self, fn, parse, data, worker_context) -> futures.Future | None:
        """The job parsing data and running fn on a worker (None once the pool is shut down);
        its slot among max_concurrent_rpcs is freed when it is done, or dropped before it
        started."""
        try:
            job = self._executor.submit(_run, fn, parse, data, worker_context)
        except RuntimeError:  # the server is stopping
            self._release()
            return None
        job.add_done_callback(self._release)
        return job

    def _release(self, job=None) -> None:
        with self._lock:
            self._in_progress -= 1

    # -- waiting for the message ------------------------------------------------------------

    async def _receive(self, context):
        """The request message's bytes, or EOF; ends the call past the receive deadline, or
        when a bound below needs its place.

        A stream reads (its read is posted, so gRPC grants it its whole message's window) if
        fewer than max_reading do. Else, if another client holds more reading streams than its
        own client, that client's oldest reading stream is ended and this one reads in its
        place; if its own client holds the most, it is parked: no read is posted, so it holds
        at most the 64 KiB window of `grpc.http2.lookahead_bytes`, until a reading stream
        ends and it is the oldest parked one. So one client that opens more streams than the
        reading cap waits behind its own streams and others' requests still get read, and an
        attacker's stream the cap ends is re-opened into the parked queue, not into another
        eviction. Past max_awaiting streams in all, the oldest parked one (else the oldest)
        is ended."""
        waiting = _Awaiting(peers.grpc_peer_key(context.peer()))
        key = next(self._ids)
        timer = self._loop.call_later(self.receive_timeout_s * random.uniform(0.75, 1.0),
                                      waiting.end, "receive_timeout")
        if len(self._awaiting) >= self.max_awaiting:
            oldest = next(iter(self._parked or self._awaiting))
            self._end(oldest, "evicted_awaiting")
        self._awaiting[key] = waiting
        if self._n_reading >= self.max_reading:
            hog = max(self._reading.items(), key=lambda kv: len(kv[1]))
            if hog[0] != waiting.client and len(hog[1]) > len(
                    self._reading.get(waiting.client, ())):
                self._end(next(iter(hog[1])), "evicted_reading")
        if self._n_reading < self.max_reading:
            self._start_reading(key, waiting)
        else:
            waiting.turn = self._loop.create_future()
            self._parked[key] = waiting
        waiting.task = asyncio.ensure_future(self._message(context, waiting))
        try:
            return await waiting.task
        except asyncio.CancelledError:
            if waiting.reason is None:  # the call itself was cancelled: the client left
                waiting.task.cancel()
                raise
        finally:
            timer.cancel()
            self._forget(key)
        self.counts[waiting.reason] += 1
        if waiting.reason == "evicted_awaiting":
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"more than {self.max_awaiting} streams were waiting for their "
                         "request message (--grpc_max_streams_awaiting_request) and this "
                         "one had waited longest")
        if waiting.reason == "evicted_reading":
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                         f"{self.max_reading} streams were reading their request message "
                         "(--grpc_awaiting_message_memory_mb over the receive limit), this "
                         "client held the most of them, and this one had waited longest")
        await _abort(context, grpc.StatusCode.DEADLINE_EXCEEDED,
                     f"the request message did not arrive within "
                     f"{self.receive_timeout_s:g} s of the call's start "
                     "(--grpc_request_receive_timeout_seconds)")

    @staticmethod
    async def _message(context, waiting: _Awaiting):
        if waiting.turn is not None:
            await waiting.turn
        return await context.read()

    def _start_reading(self, key: int, waiting: _Awaiting) -> None:
        waiting.state = "reading"
        self._reading.setdefault(waiting.client, collections.OrderedDict())[key] = waiting
        self._n_reading += 1

    def _end(self, key: int, reason: str) -> None:
        """Ends the waiting stream `key` for `reason`; its place is free at once."""
        waiting = self._awaiting.get(key)
        if waiting is not None:
            self._forget(key, promote=False)
            waiting.end(reason)

    def _forget(self, key: int, promote: bool = True) -> None:
        """Drops stream `key` from the books (once); a reading place it freed goes to the
        oldest parked stream."""
        waiting = self._awaiting.pop(key, None)
        if waiting is None:
            return
        self._parked.pop(key, None)
        if waiting.state == "reading":
            mine = self._reading[waiting.client]
            del mine[key]
            if not mine:
                del self._reading[waiting.client]
            self._n_reading -= 1
            if promote and self._parked:
                next_key, next_waiting = self._parked.popitem(last=False)
                self._start_reading(next_key, next_waiting)
                if not next_waiting.turn.done():
                    next_waiting.turn.set_result(None)


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
    """A stream waiting for its request message: its client (peers.grpc_peer_key), whether it
    reads or is parked, the turn a parked one waits for, the task reading it, and why it was
    cut short (None: it was not)."""

    __slots__ = ("client", "state", "turn", "task", "reason")

    def __init__(self, client: str):
        self.client = client
        self.state = "parked"
        self.turn: asyncio.Future | None = None
        self.task: asyncio.Future | None = None
        self.reason: str | None = None

    def end(self, reason: str) -> None:
        if self.reason is None and self.task is not None and not self.task.done():
            self.reason = reason
            self.task.cancel()
