"""Server-side dynamic batching, configured with TF Serving's batching-parameters text format.

    max_batch_size { value: 256 }
    batch_timeout_micros { value: 5000 }
    max_enqueued_batches { value: 16 }
    num_batch_threads { value: 2 }
    enable_large_batch_splitting { value: true }
    max_execution_batch_size { value: 32 }

As in TF Serving's shared batch scheduler, one pool of `num_batch_threads` threads serves one
queue per (model version, signature). Concurrent requests in a queue are merged along the batch
dimension into batches of at most the execution batch size (`max_execution_batch_size` with
`enable_large_batch_splitting`, else `max_batch_size`), waiting at most `batch_timeout_micros`
for more rows, run once, and split back. Every field of the proto is honoured:

* `max_batch_size` is the largest request (rows) a queue takes: a larger one can never be
  served and is refused with INVALID_ARGUMENT. With `enable_large_batch_splitting` a request is
  cut into pieces that fill execution batches, and its outputs are put back together.
* The queue is bounded (`max_enqueued_batches` x execution batch size rows): a request that
  does not fit now is refused at once with RESOURCE_EXHAUSTED instead of growing memory.
* `allowed_batch_sizes` pads a merged batch (with copies of its first row) up to the next
  allowed size; the padding rows' outputs are dropped.
* `pad_variable_length_inputs` pads inputs whose non-batch dimensions differ (zeros, or b"" for
  strings) to a common shape; without it only requests of equal shapes share a batch.
* `thread_pool_name` names the batch threads.

A request's deadline and its client's cancellation travel with it (serving.cancel.Call): work
whose requests are gone is dropped before it runs, and a batch already running is stopped once
every request in it is gone. A queue exists only while it holds requests: it is created by the
first request for its key and dropped when its last one leaves (taken into a batch, expired or
cancelled), so no queue, and no model version a queue's run function holds, outlives its
requests, whenever the version is unloaded.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,  # noqa: F401  (registers the wrapper types)
)

from pgn_tf.serving.cancel import Call, Watchdog
from pgn_tf.serving.status import Code, RequestError


@dataclasses.dataclass
class BatchingParameters:
    """TF Serving's BatchingParameters (session_bundle_config.proto), every field."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 5000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 2
    thread_pool_name: str = "batch_threads"
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None

    @property
    def execution_batch_size(self) -> int:
        """Rows in one model run at most."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    @property
    def queue_capacity_rows(self) -> int:
        return self.max_enqueued_batches * self.execution_batch_size

    def validate(self) -> BatchingParameters:
        """Raises ValueError (one line) for values that cannot all be honoured together."""
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"bad batching parameters: {name} must be positive")
        if self.batch_timeout_micros < 0:
            raise ValueError("bad batching parameters: batch_timeout_micros must be >= 0")
        if self.max_execution_batch_size is not None:
            if not self.enable_large_batch_splitting:
                raise ValueError("bad batching parameters: max_execution_batch_size is only used "
                                 "with enable_large_batch_splitting { value: true }")
            if not 0 < self.max_execution_batch_size <= self.max_batch_size:
                raise ValueError("bad batching parameters: max_execution_batch_size must be in "
                                 f"[1, max_batch_size={self.max_batch_size}]")
        sizes = list(self.allowed_batch_sizes)
        if sizes:
            if any(s <= 0 for s in sizes) or sizes != sorted(set(sizes)):
                raise ValueError("bad batching parameters: allowed_batch_sizes must be positive "
                                 "and strictly increasing")
            if sizes[-1] != self.execution_batch_size:
                raise ValueError(
                    "bad batching parameters: the last of allowed_batch_sizes must equal the "
                    f"execution batch size {self.execution_batch_size} ("
                    + ("max_execution_batch_size" if self.max_execution_batch_size else
                       "max_batch_size") + ")")
        if self.max_batch_size > self.queue_capacity_rows:
            raise ValueError(
                f"bad batching parameters: a request of max_batch_size={self.max_batch_size} rows "
                f"can never fit the queue of max_enqueued_batches x execution batch size = "
                f"{self.queue_capacity_rows} rows")
        return self


def _batching_message_class():
    """BatchingParameters of TF Serving's session_bundle_config.proto (not shipped in the pip
    package), declared here so the real text format parses with protobuf's own parser. A field
    this server does not know is a parse error: nothing is silently ignored."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="pgn_tf_serving/batching_parameters.proto", package="pgn_tf_serving",
        dependency=["google/protobuf/wrappers.proto"], syntax="proto3",
    )
    msg = fdp.message_type.add(name="BatchingParameters")
    F = descriptor_pb2.FieldDescriptorProto
    fields = [("max_batch_size", ".google.protobuf.Int64Value"),
              ("batch_timeout_micros", ".google.protobuf.Int64Value"),
              ("max_enqueued_batches", ".google.protobuf.Int64Value"),
              ("num_batch_threads", ".google.protobuf.Int64Value"),
              ("thread_pool_name", ".google.protobuf.StringValue")]
    for i, (name, type_name) in enumerate(fields, 1):
        msg.field.add(name=name, number=i, type=F.TYPE_MESSAGE, type_name=type_name,
                      label=F.LABEL_OPTIONAL)
    msg.field.add(name="allowed_batch_sizes", number=6, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    msg.field.add(name="pad_variable_length_inputs", number=7, type=F.TYPE_BOOL,
                  label=F.LABEL_OPTIONAL)
    msg.field.add(name="enable_large_batch_splitting", number=8, type=F.TYPE_MESSAGE,
                  type_name=".google.protobuf.BoolValue", label=F.LABEL_OPTIONAL)
    msg.field.add(name="max_execution_batch_size", number=9, type=F.TYPE_MESSAGE,
                  type_name=".google.protobuf.Int64Value", label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.Default()
    try:
        desc = pool.FindMessageTypeByName("pgn_tf_serving.BatchingParameters")
    except KeyError:
        pool.Add(fdp)
        desc = pool.FindMessageTypeByName("pgn_tf_serving.BatchingParameters")
    return message_factory.GetMessageClass(desc)


def parse_batching_parameters(text: str) -> BatchingParameters:
    """TF Serving's text format -> validated BatchingParameters; ValueError names the problem."""
    msg = _batching_message_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ValueError(f"bad batching parameters: {e}") from None
    out = BatchingParameters()
    for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                 "num_batch_threads", "max_execution_batch_size"):
        if msg.HasField(name):
            setattr(out, name, int(getattr(msg, name).value))
    if msg.HasField("thread_pool_name"):
        out.thread_pool_name = msg.thread_pool_name.value or out.thread_pool_name
    if msg.HasField("enable_large_batch_splitting"):
        out.enable_large_batch_splitting = bool(msg.enable_large_batch_splitting.value)
    out.allowed_batch_sizes = tuple(int(s) for s in msg.allowed_batch_sizes)
    out.pad_variable_length_inputs = bool(msg.pad_variable_length_inputs)
    return out.validate()


class _Task:
    """One request in a queue; with splitting, its rows may run in several batches."""

    __slots__ = ("inputs", "rows", "call", "enqueued", "offset", "done_rows", "pieces",
                 "event", "outputs", "error", "lock")

    def __init__(self, inputs: dict, rows: int, call: Call):
        self.inputs = inputs
        self.rows = rows
        self.call = call  # its deadline and whether its client left
        self.enqueued = time.monotonic()
        self.offset = 0  # next row not yet taken into a batch
        self.done_rows = 0
        self.pieces: list[tuple[int, dict]] = []  # (first row, outputs of those rows)
        self.event = threading.Event()
        self.outputs = None
        self.error = None
        self.lock = threading.Lock()  # pieces of one task may finish on two batch threads

    def trailing_shapes(self) -> dict:
        return {k: v.shape[1:] for k, v in self.inputs.items()}

    def fail(self, error: Exception) -> None:
        with self.lock:
            if not self.event.is_set():
                self.error = error
                self.event.set()

    def piece_done(self, start: int, rows: int, outputs: dict) -> None:
        with self.lock:
            if not self.event.is_set():
                self._add_piece(start, rows, outputs)

    def _add_piece(self, start: int, rows: int, outputs: dict) -> None:
        self.pieces.append((start, outputs))
        self.done_rows += rows
        if self.done_rows >= self.rows:
            self.pieces.sort(key=lambda p: p[0])
            self.outputs = {k: np.concatenate([p[1][k] for p in self.pieces], axis=0)
                            for k in self.pieces[0][1]}
            self.event.set()


class _Queue:
    def __init__(self, key, run: Callable[[dict], dict]):
        self.key = key
        self.run = run
        self.tasks: collections.deque[_Task] = collections.deque()
        self.rows = 0  # rows queued and not yet taken into a batch


def _pad_to(arr: np.ndarray, shape: tuple) -> np.ndarray:
    if arr.shape == shape:
        return arr
    fill = b"" if arr.dtype == object else 0
    return np.pad(arr, [(0, t - s) for s, t in zip(arr.shape, shape)], constant_values=fill)


class BatchScheduler:
    """One pool of batch threads over many queues (TF Serving's SharedBatchScheduler).

    Args:
      params: BatchingParameters (validated).
      on_batch: optional callable(key, rows, padded_rows) told of every batch run.
      watchdog: the serving.cancel.Watchdog that stops a batch whose requests are all gone
        (None: batches always run to their end).
    """

    def __init__(self, params: BatchingParameters, on_batch=None,
                 watchdog: Watchdog | None = None):
        self.params = params.validate()
        self.on_batch = on_batch
        self.watchdog = watchdog
        self._queues: dict = {}
        self._cv = threading.Condition()
        self._closed = False
        self._rr = itertools.count()
        self._threads = [threading.Thread(target=self._worker, daemon=True,
                                          name=f"{params.thread_pool_name}-{i}")
                         for i in range(params.num_batch_threads)]
        for t in self._threads:
            t.start()

    # -- producers --------------------------------------------------------------------------

    def submit(self, key, run: Callable[[dict], dict], inputs: dict,
               call: Call | None = None) -> dict:
        """Queues `inputs` (numpy arrays sharing a batch axis) on the queue `key`, creating it
        with `run` if needed, and waits for the outputs until `call`'s deadline or its
        cancellation. Raises RequestError."""
        p = self.params
        call = call or Call()
        rows = int(next(iter(inputs.values())).shape[0])
        if rows > p.max_batch_size:
            raise RequestError(Code.INVALID_ARGUMENT,
                               f"request has {rows} rows, over the batching max_batch_size of "
                               f"{p.max_batch_size}; send at most {p.max_batch_size} a request")
        task = _Task(inputs, rows, call)
        with self._cv:
            if self._closed:
                raise RequestError(Code.UNAVAILABLE, "the server is shutting down")
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(key, run)
            if queue.rows + rows > p.queue_capacity_rows:
                self._drop_if_empty(queue)
                raise RequestError(
                    Code.RESOURCE_EXHAUSTED,
                    f"batching queue is full ({queue.rows} rows waiting, capacity "
                    f"{p.queue_capacity_rows}); retry later")
            queue.tasks.append(task)
            queue.rows += rows
            self._cv.notify()
        call.on_cancel(lambda: task.fail(call.error()))
        timeout = None if call.deadline is None else max(0.0, call.deadline - time.monotonic())
        done = task.event.wait(timeout)
        if not done or call.gone(time.monotonic()):
            with self._cv:  # its rows not yet in a batch leave the queue now
                if task in queue.tasks:
                    queue.tasks.remove(task)
                    queue.rows -= task.rows - task.offset
                self._drop_if_empty(queue)
            if not done:
                raise RequestError(Code.DEADLINE_EXCEEDED,
                                   "deadline exceeded while waiting in the batching queue")
        if task.error is not None:
            raise task.error
        return task.outputs

    def queue_count(self) -> int:
        with self._cv:
            return len(self._queues)

    def _drop_if_empty(self, queue: _Queue) -> None:
        """A queue leaves with its last request (cv held)."""
        if not queue.tasks and self._queues.get(queue.key) is queue:
            del self._queues[queue.key]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            for q in self._queues.values():
                for t in q.tasks:
                    t.fail(RequestError(Code.UNAVAILABLE, "the server is shutting down"))
            self._queues.clear()
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    # -- batch threads ----------------------------------------------------------------------

    def _take(self, queue: _Queue, now: float) -> list[tuple[_Task, int, int]]:
        """Pieces (task, start, end) for one batch from the head of `queue` (cv held)."""
        p = self.params
        limit = p.execution_batch_size
        pieces, rows, shapes = [], 0, None
        while queue.tasks and rows < limit:
            task = queue.tasks[0]
            if task.call.gone(now):
                queue.tasks.popleft()
                queue.rows -= task.rows - task.offset
                task.fail(task.call.error() if task.call.cancelled else RequestError(
                    Code.DEADLINE_EXCEEDED, "deadline exceeded before the request could run"))
                continue
            if not p.pad_variable_length_inputs:
                if shapes is None:
                    shapes = task.trailing_shapes()
                elif task.trailing_shapes() != shapes:
                    break
            left = task.rows - task.offset
            take = min(left, limit - rows)
            if take < left and not p.enable_large_batch_splitting:
                break  # the whole request goes into the next batch
            pieces.append((task, task.offset, task.offset + take))
            task.offset += take
            rows += take
            queue.rows -= take
            if task.offset == task.rows:
                queue.tasks.popleft()
        return pieces

    def _next_batch(self):
        """(queue, pieces) of the next batch to run, or None at close (cv held)."""
        while not self._closed:
            now = time.monotonic()
            got, soonest = self._scan(now)
            if got is not None:
                return got
            # no reference to any queue is held while waiting: a queue dropped meanwhile
            # (and the model version its run function holds) is freed at once
            self._cv.wait(None if soonest is None else max(0.0, soonest - now))
        return None

    def _scan(self, now: float):
        """((queue, pieces) of a batch ready to run, or None; when the next one will be ready,
        or None), visiting the queues round robin between models (cv held)."""
        timeout = self.params.batch_timeout_micros / 1e6
        queues = list(self._queues.values())
        if queues:
            k = next(self._rr) % len(queues)
            queues = queues[k:] + queues[:k]
        soonest = None
        for q in queues:
            if not q.tasks:
                self._drop_if_empty(q)
                continue
            ready_at = q.tasks[0].enqueued + timeout
            if q.rows >= self.params.execution_batch_size or now >= ready_at:
                pieces = self._take(q, now)
                self._drop_if_empty(q)
                if pieces:
                    return (q, pieces), None
                continue
            soonest = ready_at if soonest is None else min(soonest, ready_at)
        return None, soonest

    def _merge(self, pieces) -> tuple[dict, int, int]:
        keys = list(pieces[0][0].inputs)
        parts = {k: [t.inputs[k][s:e] for t, s, e in pieces] for k in keys}
        if self.params.pad_variable_length_inputs:
            for k, arrs in parts.items():
                shape = tuple(np.max([a.shape[1:] for a in arrs], axis=0)) if arrs[0].ndim > 1 \
                    else ()
                parts[k] = [_pad_to(a, (a.shape[0], *shape)) for a in arrs]
        merged = {k: np.concatenate(v, axis=0) for k, v in parts.items()}
        rows = sum(e - s for _, s, e in pieces)
        padded = rows
        for size in self.params.allowed_batch_sizes:
            if size >= rows:
                padded = size
                break
        if padded > rows:  # copies of the first row fill the batch up to an allowed size
            merged = {k: np.concatenate([v, np.repeat(v[:1], padded - rows, axis=0)], axis=0)
                      for k, v in merged.items()}
        return merged, rows, padded

    def _worker(self) -> None:
        while True:
            with self._cv:
                got = self._next_batch()
            if got is None:
                return
            queue, pieces = got
            try:
                merged, rows, padded = self._merge(pieces)
                if self.watchdog is None:
                    out = queue.run(merged)
                else:  # stopped once every request of the batch is gone
                    out = self.watchdog.run(functools.partial(queue.run, merged),
                                            [t.call for t, _, _ in pieces])
                if self.on_batch is not None:
                    self.on_batch(queue.key, rows, padded)
                start = 0
                for task, s, e in pieces:
                    task.piece_done(s, e - s, {k: v[start : start + e - s] for k, v in out.items()})
                    start += e - s
            except Exception as e:  # the error goes to every request of the batch
                for task, _, _ in pieces:
                    task.fail(e)
            del got, queue, pieces
