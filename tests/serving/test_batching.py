"""serving.batching: TF Serving's batching parameters, every field honoured or refused."""

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest

from pgn_tf.serving.batching import BatchingParameters, BatchScheduler, parse_batching_parameters
from pgn_tf.serving.cancel import Call
from pgn_tf.serving.status import Code, RequestError
from tests.serving.helpers import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rows(*values):
    return {"a": np.array([str(v).encode() for v in values], dtype=object)}


class Recorder:
    """A run function that records the batches it was given and echoes its input."""

    def __init__(self, gate=None):
        self.batches = []
        self.gate = gate  # holds the batch in the model until set
        self.entered = threading.Event()  # a batch reached the model
        self.lock = threading.Lock()

    def __call__(self, inputs):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        with self.lock:
            self.batches.append([x.decode() for x in inputs["a"]])
        return {"out": inputs["a"]}


def concurrently(fns):
    results, threads = [None] * len(fns), []
    for i, fn in enumerate(fns):
        def run(i=i, fn=fn):
            try:
                results[i] = fn()
            except Exception as e:  # noqa: BLE001
                results[i] = e
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    for t in threads:
        t.join(30)
    return results


def test_the_shipped_config_parses_and_splits_large_requests():
    with open(os.path.join(ROOT, "serving", "batching.config")) as f:
        p = parse_batching_parameters(f.read())
    assert p.enable_large_batch_splitting and p.max_batch_size == 256
    assert p.execution_batch_size == p.max_execution_batch_size == 32


@pytest.mark.parametrize("text, message", [
    ("max_batch_size: 3", "bad batching parameters"),
    ("unknown_field { value: 1 }", "bad batching parameters"),
    ("max_batch_size { value: 0 }", "max_batch_size must be positive"),
    ("max_batch_size { value: 8 } allowed_batch_sizes: 4", "the last of allowed_batch_sizes"),
    ("max_batch_size { value: 8 } allowed_batch_sizes: 4 allowed_batch_sizes: 2 "
     "allowed_batch_sizes: 8", "strictly increasing"),
    ("max_execution_batch_size { value: 4 }", "only used with enable_large_batch_splitting"),
    ("max_batch_size { value: 64 } max_enqueued_batches { value: 2 } "
     "enable_large_batch_splitting { value: true } max_execution_batch_size { value: 8 }",
     "can never fit the queue"),
])
def test_bad_parameters_are_refused_at_start_up(text, message):
    with pytest.raises(ValueError, match=message):
        parse_batching_parameters(text)


def test_concurrent_requests_are_merged_and_split_back():
    """Three 2-row requests fill a 6-row batch: the full batch, not a timer, makes it run, so
    they share one batch however slowly their threads start (the timeout is never reached)."""
    run, seen = Recorder(), []
    s = BatchScheduler(BatchingParameters(max_batch_size=6, batch_timeout_micros=3_600_000_000,
                                          num_batch_threads=1),
                       on_batch=lambda key, n, padded: seen.append((key, n, padded)))
    try:
        out = concurrently([lambda i=i: s.submit("k", run, rows(i, i + 10)) for i in range(3)])
    finally:
        s.close()
    for i, o in enumerate(out):  # each gets its own rows back, in its own order
        assert isinstance(o, dict), o
        assert [x.decode() for x in o["out"]] == [str(i), str(i + 10)]
    assert seen == [("k", 6, 6)]  # one run of the model, with all six rows
    assert len(run.batches) == 1 and sorted(run.batches[0]) == sorted(
        str(v) for i in range(3) for v in (i, i + 10))


def test_a_request_over_max_batch_size_is_invalid_not_resource_exhausted():
    s = BatchScheduler(BatchingParameters(max_batch_size=4, num_batch_threads=1))
    try:
        with pytest.raises(RequestError) as e:
            s.submit("k", Recorder(), rows(*range(5)))
        assert e.value.code == Code.INVALID_ARGUMENT and "max_batch_size of 4" in e.value.message
    finally:
        s.close()


def test_large_batch_splitting_runs_pieces_and_reassembles_them():
    run = Recorder()
    seen = []
    s = BatchScheduler(BatchingParameters(max_batch_size=10, batch_timeout_micros=0,
                                          num_batch_threads=2, max_enqueued_batches=4,
                                          enable_large_batch_splitting=True,
                                          max_execution_batch_size=3),
                       on_batch=lambda key, n, padded: seen.append((n, padded)))
    try:
        out = s.submit("k", run, rows(*range(10)))
    finally:
        s.close()
    assert [x.decode() for x in out["out"]] == [str(i) for i in range(10)]
    assert sorted(len(b) for b in run.batches) == [1, 3, 3, 3]
    assert sorted(seen) == [(1, 1), (3, 3), (3, 3), (3, 3)]


def test_allowed_batch_sizes_pad_with_the_first_row_and_drop_its_outputs():
    run = Recorder()
    seen = []
    s = BatchScheduler(BatchingParameters(max_batch_size=8, batch_timeout_micros=0,
                                          num_batch_threads=1, allowed_batch_sizes=(2, 4, 8)),
                       on_batch=lambda key, n, padded: seen.append((n, padded)))
    try:
        out = s.submit("k", run, rows(7, 8, 9))
    finally:
        s.close()
    assert run.batches == [["7", "8", "9", "7"]]
    assert [x.decode() for x in out["out"]] == ["7", "8", "9"] and seen == [(3, 4)]


def test_variable_length_inputs_are_padded_only_when_asked():
    def run(inputs):
        return {"out": inputs["a"]}

    a = {"a": np.ones([1, 2], np.float32)}
    b = {"a": np.ones([1, 3], np.float32)}
    # padded: the two 1-row requests fill a 2-row batch, so they run together (the full batch
    # starts it, never the timer); not padded: their shapes differ, so each runs alone, the
    # short timeout letting the one left over run
    for pad, max_rows, timeout, shapes in [(True, 2, 3_600_000_000, {(1, 3)}),
                                           (False, 4, 200_000, {(1, 2), (1, 3)})]:
        s = BatchScheduler(BatchingParameters(max_batch_size=max_rows, num_batch_threads=1,
                                              batch_timeout_micros=timeout,
                                              pad_variable_length_inputs=pad))
        try:
            out = concurrently([lambda s=s: s.submit("k", run, a),
                                lambda s=s: s.submit("k", run, b)])
        finally:
            s.close()
        assert all(isinstance(o, dict) for o in out), out
        assert {o["out"].shape for o in out} == shapes
        if pad:
            assert out[0]["out"].tolist() == [[1.0, 1.0, 0.0]]


def test_full_queue_refuses_with_resource_exhausted_and_expired_work_is_dropped():
    gate = threading.Event()
    run = Recorder(gate=gate)
    s = BatchScheduler(BatchingParameters(max_batch_size=1, batch_timeout_micros=0,
                                          max_enqueued_batches=1, num_batch_threads=1))
    try:
        first = threading.Thread(target=lambda: s.submit("k", run, rows("first")))
        first.start()
        assert run.entered.wait(10)  # the (only) batch thread is busy with "first"
        expired = concurrently([lambda: s.submit("k", run, rows("late"),
                                                 Call(deadline=time.monotonic() + 0.2))])[0]
        assert isinstance(expired, RequestError) and expired.code == Code.DEADLINE_EXCEEDED
        assert s.queue_count() == 0  # the expired request left; its queue left with it
        queued = threading.Thread(target=lambda: s.submit("k", run, rows("queued")))
        queued.start()
        assert wait_until(lambda: s.queue_count() == 1)
        with pytest.raises(RequestError) as e:
            s.submit("k", run, rows("over"))
        assert e.value.code == Code.RESOURCE_EXHAUSTED
        gate.set()
        first.join(10)
        queued.join(10)
    finally:
        gate.set()
        s.close()
    assert run.batches == [["first"], ["queued"]]  # "late" expired and never ran


def test_a_cancelled_request_leaves_its_queue_at_once():
    gate = threading.Event()
    run = Recorder(gate=gate)
    s = BatchScheduler(BatchingParameters(max_batch_size=1, batch_timeout_micros=0,
                                          num_batch_threads=1))
    call, result = Call(), []
    try:
        first = threading.Thread(target=lambda: s.submit("k", run, rows("first")))
        first.start()
        assert run.entered.wait(10)
        waiting = threading.Thread(target=lambda: result.extend(
            concurrently([lambda: s.submit("k", run, rows("gone"), call)])))
        waiting.start()
        assert wait_until(lambda: s.queue_count() == 1)
        call.cancel()  # the client hung up
        waiting.join(10)
        assert isinstance(result[0], RequestError) and result[0].code == Code.CANCELLED
        assert s.queue_count() == 0
        gate.set()
        first.join(10)
    finally:
        gate.set()
        s.close()
    assert run.batches == [["first"]]


def test_queues_live_only_while_they_hold_requests_with_a_fixed_thread_pool():
    """A queue's run function holds its model version: a queue left behind keeps the version."""
    s = BatchScheduler(BatchingParameters(max_batch_size=4, batch_timeout_micros=0,
                                          num_batch_threads=2))
    threads = threading.active_count()
    refs = []
    try:
        for version in range(20):
            owner = Recorder()
            refs.append(weakref.ref(owner))
            assert s.submit((owner, "sig"), owner, rows(version))["out"].tolist() == \
                [str(version).encode()]
            del owner
        assert s.queue_count() == 0
        assert threading.active_count() == threads
        gc.collect()
        assert wait_until(lambda: sum(r() is not None for r in refs) == 0)
    finally:
        s.close()
