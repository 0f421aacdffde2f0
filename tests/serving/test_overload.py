"""Overload and limits: bounded concurrency, deadlines, request sizes that can never fit, idle
connections, and oversized bodies refused without being read."""

import os
import socket
import threading

import grpc
import pytest

from pgn_tf.serving.batching import BatchingParameters
from pgn_tf.serving.service import Server
from tests.serving.helpers import (
    add_version,
    raw_http,
    request,
    rest,
    stub,
    summaries,
    wait_until,
)


@pytest.fixture
def base(tiny_model, tmp_path):
    path = str(tmp_path / "m")
    add_version(path, 1, tiny_model)
    return path


def batch_runs(srv) -> float:
    return srv.metrics.batch_size.labels("m", "1", "serving_default")._sum.get()


def test_grpc_over_maximum_concurrent_rpcs_is_resource_exhausted(base):
    # A 1.5 s batch timeout holds the first request in the queue, and in its RPC slot.
    srv = Server({"m": base}, poll_seconds=0, grpc_max_threads=1, grpc_max_concurrent_rpcs=1,
                 batching=BatchingParameters(max_batch_size=8, batch_timeout_micros=1_500_000,
                                             num_batch_threads=1))
    try:
        first = {}
        t = threading.Thread(target=lambda: first.setdefault(
            "r", stub(srv).Predict(request({"articles": ["a"]}, name="m"), timeout=30)))
        t.start()
        assert wait_until(lambda: srv.scheduler.queue_count() == 1)  # "a" holds the only slot
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(request({"articles": ["b"]}, name="m"), timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        t.join(30)
        assert summaries(first["r"]) == ["a"]
    finally:
        srv.stop()


def test_expired_requests_are_dropped_not_run(base):
    srv = Server({"m": base}, rest_port="auto", poll_seconds=0, rest_api_timeout_s=0.3,
                 batching=BatchingParameters(max_batch_size=8, batch_timeout_micros=1_000_000,
                                             num_batch_threads=1))
    try:
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(request({"articles": ["a"]}, name="m"), timeout=0.3)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        code, body = rest(srv.rest_port, "/v1/models/m:predict", {"instances": ["b"]})
        assert code == 504 and "deadline exceeded" in body["error"]
        assert srv.scheduler.queue_count() == 0  # both left their queue when they expired
        # a request after them runs alone: the expired ones never ran
        assert summaries(stub(srv).Predict(request({"articles": ["c"]}, name="m"),
                                           timeout=30)) == ["c"]
        assert batch_runs(srv) == 1
    finally:
        srv.stop()


@pytest.mark.parametrize("splitting, rows, code", [
    (True, 20, None),  # over the execution batch of 4: split into pieces, answered
    (False, 20, "max_batch_size of 16"),  # over what batching can ever take: INVALID_ARGUMENT
    (True, 40, "--max_batch_rows=32"),
])
def test_requests_that_can_never_fit_are_invalid_argument(base, splitting, rows, code):
    params = BatchingParameters(max_batch_size=16 if not splitting else 32,
                                batch_timeout_micros=0, num_batch_threads=1,
                                max_enqueued_batches=8, enable_large_batch_splitting=splitting,
                                max_execution_batch_size=4 if splitting else None)
    srv = Server({"m": base}, poll_seconds=0, max_batch_rows=32, batching=params)
    try:
        articles = [f"a{i}" for i in range(rows)]
        if code is None:
            assert summaries(stub(srv).Predict(request({"articles": articles}, name="m"))) == \
                articles
            assert srv.metrics.batch_size.labels("m", "1", "serving_default")._sum.get() == rows
            return
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(request({"articles": articles}, name="m"))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and code in e.value.details()
    finally:
        srv.stop()


def test_oversized_bodies_get_413_without_being_read_and_idle_connections_close(base):
    srv = Server({"m": base}, rest_port="auto", poll_seconds=0, max_request_bytes=1000,
                 rest_api_idle_timeout_s=1)
    try:
        # Headers only: the 413 comes back although not one byte of the 10^12 was sent.
        head = (b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 1000000000000\r\n\r\n")
        assert raw_http(srv.rest_port, head) == 413
        chunked = (b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" + b"800\r\n" + b"x" * 0x800 + b"\r\n")
        assert raw_http(srv.rest_port, chunked) == 413
        assert raw_http(srv.rest_port, head.replace(b"1000000000000", b"-1")) == 400
        code, body = rest(srv.rest_port, "/v1/models/m:predict", {"instances": ["x" * 999]})
        assert code == 200
        # An idle connection is closed by the server: recv returns b"" (EOF). The client's own
        # timeout, 20 s, is far over the 1 s idle timeout, so a server that never closes it
        # raises socket.timeout instead; and under the 30 s default, so one that ignored
        # rest_api_idle_timeout_s would too.
        with socket.create_connection(("127.0.0.1", srv.rest_port), timeout=20) as s:
            try:
                got = s.recv(1)
            except TimeoutError:
                pytest.fail("the server left an idle connection open past its 1 s idle timeout")
            assert got == b""
    finally:
        srv.stop()


def test_stop_frees_the_rest_and_grpc_ports(base):
    srv = Server({"m": base}, rest_port="auto", poll_seconds=0)
    ports = (srv.port, srv.rest_port)
    srv.stop()
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
    assert not [t for t in threading.enumerate() if t.name.startswith("rest-io")]
    assert os.path.isdir(base)
