"""Runs stop when nobody waits for them: an expired deadline or a client that hung up stops a
model run already under way (serving.cancel), batched or not, and a request's decoding work is
bounded before it starts (serving.predict's work budget)."""

import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.serving.batching import BatchingParameters
from pgn_tf.serving.cancel import Call, Watchdog, _Run
from pgn_tf.serving.service import Server
from pgn_tf.serving.status import Code, RequestError
from tests.serving.helpers import (
    ARTICLE,
    add_version,
    request,
    rest,
    stub,
    summaries,
    wait_until,
)

FOREVER = 2**31 - 1  # loop steps: hours of CPU unless the run is stopped


def spin(articles, steps, version=None):
    return request({"articles": articles, "steps": np.array(steps, np.int32)}, name="spin",
                   version=version)


@pytest.fixture
def spin_base(spin_model, tmp_path):
    base = str(tmp_path / "spin")
    add_version(base, 1, spin_model)
    return base


@pytest.mark.parametrize("batched", [False, True])
def test_an_expired_request_stops_its_run_and_frees_the_only_thread(spin_base, batched):
    """One run at a time (one gRPC thread, or one batch thread): if the expired run went on
    spinning, the next request could never run."""
    batching = BatchingParameters(max_batch_size=4, batch_timeout_micros=0,
                                  num_batch_threads=1) if batched else None
    srv = Server({"spin": spin_base}, poll_seconds=0, grpc_max_threads=1,
                 grpc_max_concurrent_rpcs=4, batching=batching)
    try:
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(spin(["long"], [FOREVER]), timeout=0.5)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert wait_until(lambda: srv.watchdog.active() == 0)
        assert summaries(stub(srv).Predict(spin(["short"], [1]), timeout=60)) == ["short"]
    finally:
        srv.stop()


def test_a_cancelled_grpc_call_stops_its_run(spin_base):
    srv = Server({"spin": spin_base}, poll_seconds=0, grpc_max_threads=1,
                 grpc_max_concurrent_rpcs=4)
    try:
        call = stub(srv).Predict.future(spin(["long"], [FOREVER]))  # no deadline at all
        assert wait_until(lambda: srv.watchdog.active() == 1)
        call.cancel()
        assert wait_until(lambda: srv.watchdog.active() == 0)
        assert summaries(stub(srv).Predict(spin(["short"], [1]), timeout=60)) == ["short"]
    finally:
        srv.stop()


def test_a_batch_runs_on_while_one_of_its_requests_waits():
    live, expired = Call(), Call(deadline=time.monotonic() - 1)
    assert _Run([live, expired]).due() is None  # the live request has no deadline
    assert _Run([Call(deadline=5.0), Call(deadline=7.0)]).due() == 7.0
    live.cancel()
    assert _Run([live, expired]).due() == expired.deadline  # every request gone: stop now
    gone = Call()
    gone.cancel()
    assert _Run([gone]).due() == 0.0
    assert _Run([]).due() is None  # a warm-up run, nobody to lose


def test_the_watchdog_stops_only_its_own_run_among_concurrent_ones(spin_model):
    """TensorFlow reads a call's cancellation manager from one process-wide variable; each
    thread must run under its own."""
    fn = tf.saved_model.load(spin_model).signatures["serving_default"]
    watchdog = Watchdog()
    quick_ok, errors = [], []

    def quick():
        for _ in range(20):
            out = watchdog.run(lambda: fn(articles=tf.constant(["a"]),
                                          steps=tf.constant([200])), [Call()])
            quick_ok.append(out["summaries"].numpy().tolist() == [b"a"])

    def doomed():
        try:
            watchdog.run(lambda: fn(articles=tf.constant(["b"]), steps=tf.constant([FOREVER])),
                         [Call(deadline=time.monotonic() + 0.5)])
        except RequestError as e:
            errors.append(e.code)

    threads = [threading.Thread(target=quick), threading.Thread(target=doomed)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        watchdog.close()
    assert errors == [Code.DEADLINE_EXCEEDED]
    assert quick_ok == [True] * 20


def test_decoding_work_over_the_budget_is_refused_before_it_runs(server):
    """256 rows x beam 16 x 400 steps would decode for many seconds; it is refused at once."""
    big = {"articles": [ARTICLE] * 256, "beam_size": np.int32(16),
           "max_decode_steps": np.int32(400), "min_decode_steps": np.int32(400)}
    with pytest.raises(grpc.RpcError) as e:
        stub(server).Predict(request(big, signature="summarize_options"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "256 rows x beam 16 x 400 steps" in e.value.details()
    assert "--max_decode_work" in e.value.details()
    code, body = rest(server.rest_port, "/v1/models/pgn:predict", {
        "signature_name": "summarize_options",
        "inputs": {k: (v if k == "articles" else int(v)) for k, v in big.items()}})
    assert code == 400 and "--max_decode_work" in body["error"]
    small = {"articles": [ARTICLE] * 2, "beam_size": np.int32(2),
             "max_decode_steps": np.int32(4), "min_decode_steps": np.int32(0)}
    resp = stub(server).Predict(request(small, signature="summarize_options"), timeout=60)
    assert len(summaries(resp)) == 2


def test_the_budget_is_the_largest_default_request_unless_a_flag_sets_it(server):
    loaded = server.predictor.resolve("pgn")
    d = loaded.decode_defaults
    assert d["beam_size"] >= 1 and d["max_decode_steps"] == 16  # the fixture's export
    limits = server.predictor.limits
    assert server.predictor.work_budget(loaded) == \
        limits.max_batch_rows * d["beam_size"] * d["max_decode_steps"]
    sig = server.predictor.signature(loaded, "serving_default")
    arrays = {"articles": np.array([b"a"] * limits.max_batch_rows, dtype=object)}
    server.predictor.check_work(loaded, sig, arrays)  # the largest default request fits
    old = server.predictor.max_decode_work
    server.predictor.max_decode_work = 10
    try:
        with pytest.raises(RequestError, match="--max_decode_work of 10"):
            server.predictor.check_work(loaded, sig, arrays)
    finally:
        server.predictor.max_decode_work = old
