"""Server-side dynamic batching, configured with TF Serving's batching-parameters text format.

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 5000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 2 }

Concurrent requests for the same signature of the same model version are merged along the batch
dimension (up to max_batch_size rows, waiting at most batch_timeout_micros for more), run once,
and split back. The queue is bounded (max_enqueued_batches x max_batch_size rows): a request
that does not fit is refused at once (RESOURCE_EXHAUSTED / HTTP 429) instead of growing memory.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time

import numpy as np
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,  # noqa: F401  (registers the wrapper types)
)


class QueueFull(Exception):
    pass


@dataclasses.dataclass
class BatchingParameters:
    max_batch_size: int = 32
    batch_timeout_micros: int = 5000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 2


def _batching_message_class():
    """BatchingParameters of TF Serving's session_bundle_config.proto (not shipped in the pip
    package), declared here so the real text format parses with protobuf's own parser."""
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
    msg = _batching_message_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ValueError(f"bad batching parameters: {e}") from None
    out = BatchingParameters()
    for f in dataclasses.fields(out):
        if msg.HasField(f.name):
            value = getattr(msg, f.name).value
            if value <= 0 and f.name != "batch_timeout_micros":
                raise ValueError(f"bad batching parameters: {f.name} must be positive")
            setattr(out, f.name, int(value))
    return out


class _Task:
    __slots__ = ("inputs", "rows", "event", "outputs", "error")

    def __init__(self, inputs: dict, rows: int):
        self.inputs = inputs
        self.rows = rows
        self.event = threading.Event()
        self.outputs = None
        self.error = None


class Batcher:
    """Merges concurrent calls of one function along axis 0.

    Args:
      run: callable(dict of numpy arrays) -> dict of numpy arrays, all with a batch axis.
      params: BatchingParameters.
    """

    def __init__(self, run, params: BatchingParameters):
        self.run = run
        self.params = params
        self.capacity = params.max_batch_size * params.max_enqueued_batches
        self._queue: collections.deque[_Task] = collections.deque()
        self._queued_rows = 0
        self._cv = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._worker, daemon=True, name=f"batch-{i}")
                         for i in range(params.num_batch_threads)]
        for t in self._threads:
            t.start()

    def submit(self, inputs: dict, timeout: float | None = None) -> dict:
        rows = int(next(iter(inputs.values())).shape[0])
        task = _Task(inputs, rows)
        with self._cv:
            if self._queued_rows + rows > self.capacity:
                raise QueueFull(
                    f"batching queue is full ({self._queued_rows} rows waiting, capacity "
                    f"{self.capacity}); retry later"
                )
            self._queue.append(task)
            self._queued_rows += rows
            self._cv.notify()
        if not task.event.wait(timeout):
            raise TimeoutError("request timed out in the batching queue")
        if task.error is not None:
            raise task.error
        return task.outputs

    def _take_batch(self) -> list[_Task]:
        """Waits for a first task, then up to batch_timeout for more rows (cv held)."""
        while not self._queue and not self._closed:
            self._cv.wait()
        if self._closed:
            return []
        deadline = time.monotonic() + self.params.batch_timeout_micros / 1e6
        while self._queued_rows < self.params.max_batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cv.wait(left)
        batch, rows = [], 0
        while self._queue and (not batch or rows + self._queue[0].rows <= self.params.max_batch_size):
            task = self._queue.popleft()
            self._queued_rows -= task.rows
            batch.append(task)
            rows += task.rows
        return batch

    def _worker(self) -> None:
        while True:
            with self._cv:
                batch = self._take_batch()
            if not batch:
                return
            try:
                merged = {k: np.concatenate([t.inputs[k] for t in batch], axis=0)
                          for k in batch[0].inputs}
                out = self.run(merged)
                start = 0
                for t in batch:
                    t.outputs = {k: v[start : start + t.rows] for k, v in out.items()}
                    start += t.rows
            except Exception as e:  # the error goes to every request of the batch
                for t in batch:
                    t.error = e
            for t in batch:
                t.event.set()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
