"""Compressed requests: a gzip request may not cost the server more memory than an uncompressed
one of the allowed size. gRPC stops inflating at validation.Limits.max_message_bytes
(--max_request_bytes plus the protobuf framing), REST at the body cap (serving.rest_service's
gunzip_bounded), each before the request is parsed."""

import gzip
import http.client
import io
import json
import zlib

import grpc
import pytest
from tensorflow_serving.apis import prediction_service_pb2_grpc

from benchmarks.compressed_requests import concurrently
from pgn_tf.serving import client
from pgn_tf.serving.rest_service import gunzip_bounded
from pgn_tf.serving.status import RequestError
from pgn_tf.serving.validation import Limits
from pgn_tf.utils.procfs import memory_mb, reset_peak
from tests.serving.helpers import ARTICLE, batching_server, request, rest, stub

MAX_REQUEST_BYTES = 2 * 2**20
CONCURRENT = 8
# Beside the concurrent requests' own bound (8 x --max_request_bytes): gRPC's and waitress'
# buffers, the handler threads' stacks and the allocator's slack, measured at about 10-25 MB by
# benchmarks/compressed_requests.py. Before the receive limit followed --max_request_bytes, the
# same gRPC requests (inflating to 8 x the cap) grew the peak by about 300 MB.
MARGIN_MB = 64


# -- gunzip_bounded ---------------------------------------------------------------------------


def gunzip(data: bytes, limit: int) -> bytes:
    return bytes(gunzip_bounded(io.BytesIO(data), len(data), limit, chunk=7))


def test_gunzip_bounded_inflates_a_body_within_the_limit():
    body = json.dumps({"instances": [ARTICLE] * 20}).encode()
    assert gunzip(gzip.compress(body), len(body)) == body


@pytest.mark.parametrize("data, message", [
    (gzip.compress(b"a" * 10_001), "inflates to more than 10000 bytes"),
    (gzip.compress(b"a" * 100)[:-5], "truncated"),
    (gzip.compress(b"a" * 100) + b"xyz", "after the end of its gzip stream"),
    (gzip.compress(b"a") + gzip.compress(b"b"), "after the end of its gzip stream"),
    (b"{\"instances\": [\"a\"]}", "not valid gzip"),
    (zlib.compress(b"a" * 100), "not valid gzip"),  # zlib's header, not gzip's
# named ids: a gzip header holds the time it was made, so ids from the bytes differ between
# the test workers that collect them a second apart
], ids=["bomb", "truncated", "trailing-bytes", "two-members", "json", "zlib"])
def test_gunzip_bounded_refuses(data, message):
    with pytest.raises(RequestError) as e:
        gunzip(data, 10_000)
    assert message in str(e.value)


@pytest.mark.slow
def test_gunzip_bounded_stops_inflating_at_the_limit():
    """A bomb of 1 GB is refused after inflating little more than the limit: the refusal comes
    from a bounded inflation, not from inflating all of it first."""
    bomb = gzip.compress(b"\0" * 2**30, 9)  # about 1 MB on the wire
    seen = []

    class Stream(io.BytesIO):
        def read(self, n=-1):
            seen.append(n)
            return super().read(n)

    with pytest.raises(RequestError):
        gunzip_bounded(Stream(bomb), len(bomb), 2**20)
    assert sum(seen) < len(bomb) // 10  # stopped within the first tenth of the compressed body


def test_the_grpc_receive_limit_is_the_request_cap_plus_framing():
    limits = Limits(max_request_bytes=MAX_REQUEST_BYTES, max_batch_rows=256)
    assert MAX_REQUEST_BYTES < limits.max_message_bytes < MAX_REQUEST_BYTES + 128 * 1024
    # the largest request that passes validation fits: 256 rows whose strings fill the cap
    req = client.make_request("pgn", ["a" * (MAX_REQUEST_BYTES // 256)] * 256,
                              "summarize_options")
    req.model_spec.version_label = "x" * 1000
    assert req.ByteSize() <= limits.max_message_bytes


# -- in-process server ------------------------------------------------------------------------


def test_a_request_over_the_cap_but_within_the_framing_gets_the_reason(server):
    big = "a" * (server.options.max_request_bytes + 1)
    with pytest.raises(grpc.RpcError) as e:
        stub(server).Predict(request({"articles": [big]}), timeout=60)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max_request_bytes" in e.value.details()


def test_a_request_far_over_the_cap_is_refused_by_grpc_before_it_is_parsed(server):
    big = "a" * (2 * server.options.max_request_bytes)
    for compression in (None, grpc.Compression.Gzip):
        with grpc.insecure_channel(f"127.0.0.1:{server.port}", compression=compression,
                                   options=[("grpc.max_send_message_length", -1)]) as ch:
            with pytest.raises(grpc.RpcError) as e:
                prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
                    request({"articles": [big]}), timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
        assert "larger than max" in e.value.details()
    assert client.summarize(f"127.0.0.1:{server.port}", "pgn", [ARTICLE], timeout=60)[0]


def test_a_compressed_grpc_request_is_answered(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.port}",
                               compression=grpc.Compression.Gzip) as ch:
        resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
            request({"articles": [ARTICLE]}), timeout=60)
    assert resp.outputs["summaries"].string_val[0]


def post(port, body: bytes, encoding: str | None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Encoding": encoding} if encoding else {}
    try:
        conn.request("POST", "/v1/models/pgn:predict", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_a_gzip_rest_body_is_answered_as_the_same_body_uncompressed(server):
    body = json.dumps({"instances": [ARTICLE]}).encode()
    plain = rest(server.rest_port, "/v1/models/pgn:predict", raw=body)
    code, text = post(server.rest_port, gzip.compress(body), "gzip")
    assert plain[0] == code == 200
    assert json.loads(text) == plain[1]


@pytest.mark.parametrize("encoding, data, message", [
    ("br", b'{"instances": ["a"]}', "Content-Encoding 'br' is not supported"),
    ("gzip", b'{"instances": ["a"]}', "not valid gzip"),
    ("gzip, gzip", b"x", "Content-Encoding 'gzip, gzip' is not supported"),
])
def test_bad_rest_encodings_get_400_naming_them(server, encoding, data, message):
    code, text = post(server.rest_port, data, encoding)
    assert code == 400 and message in text, text


def test_a_rest_body_inflating_past_the_cap_gets_400(server):
    cap = 2 * server.options.max_request_bytes
    bomb = gzip.compress(json.dumps({"instances": ["a" * cap]}).encode())
    code, text = post(server.rest_port, bomb, "gzip")
    assert code == 400 and f"inflates to more than {cap} bytes" in text, text


# -- a server process: peak memory under concurrent bombs -------------------------------------


@pytest.fixture(scope="module")
def capped_child(exported):
    """A server process of its own (its peak RSS is its own) with a 2 MiB --max_request_bytes."""
    with batching_server(exported, ["--max_request_bytes", str(MAX_REQUEST_BYTES)]) as server:
        yield server


def grpc_gzip(port: int, req) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}", compression=grpc.Compression.Gzip,
                               options=[("grpc.max_send_message_length", -1)]) as ch:
        try:
            prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(req, timeout=120)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


def test_concurrent_compressed_bombs_are_refused_in_bounded_memory(capped_child):
    """8 gRPC requests and 8 REST bodies at once, each ~40 KB on the wire inflating to 8 x
    --max_request_bytes: all refused, the server's peak RSS grows by less than 8 x what one
    request may inflate to (gRPC: max_message_bytes; REST: the body cap) plus the margin, and a
    well-formed request is answered right after."""
    proc, grpc_port, rest_port = capped_child
    assert client.summarize(f"127.0.0.1:{grpc_port}", "pgn", [ARTICLE], timeout=60)[0]
    bomb = "a" * (8 * MAX_REQUEST_BYTES)
    grpc_bomb = client.make_request("pgn", [bomb])
    rest_bomb = gzip.compress(json.dumps({"instances": [bomb]}).encode())
    assert len(rest_bomb) < 8 * MAX_REQUEST_BYTES // 100
    limits = Limits(MAX_REQUEST_BYTES)
    for name, fn, refused, cap in [
            ("gRPC", lambda: grpc_gzip(grpc_port, grpc_bomb),
             {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT},
             limits.max_message_bytes),
            ("REST", lambda: post(rest_port, rest_bomb, "gzip")[0], {400, 413},
             2 * MAX_REQUEST_BYTES)]:  # the body cap
        bound = CONCURRENT * cap / 2**20 + MARGIN_MB
        assert reset_peak(proc.pid), "the peak is measured from /proc/PID/clear_refs (Linux)"
        before = memory_mb(proc.pid)
        codes = concurrently(lambda i, fn=fn: fn(), CONCURRENT)
        after = memory_mb(proc.pid)
        growth = after["peak_rss_mb"] - before["rss_mb"]
        print(f"{name}: {codes}, peak RSS growth {growth:.1f} MB (bound {bound:.0f} MB)")
        assert set(codes) <= refused, codes
        assert growth < bound, (name, before, after)
        assert proc.poll() is None
        assert client.summarize(f"127.0.0.1:{grpc_port}", "pgn", [ARTICLE], timeout=60)[0]
        assert client.summarize_rest(f"127.0.0.1:{rest_port}", "pgn", [ARTICLE], timeout=60)[0]
