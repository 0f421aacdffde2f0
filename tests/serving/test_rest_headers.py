"""Every REST response says what it is and forbids sniffing: each route and status, those the
application answers and those waitress answers before it (a malformed request, a body or
headers over their caps, an unknown Transfer-Encoding, an application that raised), carries
`X-Content-Type-Options: nosniff` and `Content-Type: application/json` (the explanation page its
HTML, the metrics Prometheus' text); request text quoted back is cut and has no raw "<" or ">"."""

import http.client
import json
import socket

import pytest

from pgn_tf.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from pgn_tf.serving.service import Server
from pgn_tf.serving.status import Code, RequestError
from tests.serving.helpers import METRICS_PATH, add_version

SCRIPT = "<script>alert(1)</script>"
LONG = "<b>" * 400  # a name of 1,200 characters
HTML = "text/html; charset=utf-8"
# An article that names an error makes the model run raise it (the statuses no well-formed
# request provokes on a healthy server).
INJECTED = {"<raise internal>": RuntimeError("<b>boom</b>"),
            "<raise unavailable>": RequestError(Code.UNAVAILABLE, "<b>shutting down</b>"),
            "<raise deadline>": RequestError(Code.DEADLINE_EXCEEDED, "<b>too late</b>"),
            "<raise exhausted>": RequestError(Code.RESOURCE_EXHAUSTED, "<b>too many</b>")}


def _predict_body(*articles, signature=""):
    return json.dumps({"signature_name": signature, "instances": list(articles)}).encode()


# (method, path, body, extra headers, status, content type): the application's routes.
ROUTES = [
    ("GET", "/v1/models/m", None, {}, 200, "application/json"),
    ("GET", "/v1/models/m/versions/1", None, {}, 200, "application/json"),
    ("GET", "/v1/models/m/metadata", None, {}, 200, "application/json"),
    ("GET", "/v1/models/m/versions/1/metadata", None, {}, 200, "application/json"),
    ("GET", "/v1/models/m/explain", None, {}, 200, HTML),
    ("GET", "/v1/models/m/versions/1/explain", None, {}, 200, HTML),
    ("GET", METRICS_PATH, None, {}, 200, METRICS_CONTENT_TYPE),
    ("POST", "/v1/models/m:predict", _predict_body("a"), {}, 200, "application/json"),
    ("POST", "/v1/models/m/versions/1:predict", b'{"inputs": ["a"]}', {}, 200,
     "application/json"),
    # hostile names and bodies
    ("GET", f"/v1/models/{SCRIPT}/explain", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/{SCRIPT}", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/{LONG}/metadata", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/m/labels/{SCRIPT}", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/m/labels/{SCRIPT}/explain", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/m/versions/{SCRIPT}", None, {}, 400, "application/json"),
    ("GET", "/v1/models/m/versions/9/explain", None, {}, 404, "application/json"),
    ("GET", f"/v1/models/m/{SCRIPT}", None, {}, 404, "application/json"),
    ("GET", "/v1/models/", None, {}, 404, "application/json"),
    ("GET", f"/{SCRIPT}", None, {}, 404, "application/json"),
    ("GET", "/static/explain.html", None, {}, 404, "application/json"),
    ("GET", "/v1/models/m%ff", None, {}, 400, "application/json"),
    ("GET", "/v1/models/m:predict", None, {}, 400, "application/json"),
    ("POST", "/v1/models/m/explain", b"{}", {}, 400, "application/json"),
    ("POST", METRICS_PATH, b"{}", {}, 400, "application/json"),
    ("POST", "/v1/models/m:predict", SCRIPT.encode(), {}, 400, "application/json"),
    ("POST", "/v1/models/m:predict", b"\xff<b>", {}, 400, "application/json"),
    ("POST", "/v1/models/m:predict", _predict_body("a", signature=SCRIPT), {}, 400,
     "application/json"),
    ("POST", "/v1/models/m:predict", json.dumps({"instances": [{SCRIPT: "a"}]}).encode(), {},
     400, "application/json"),
    ("POST", "/v1/models/m:predict", json.dumps({"inputs": {SCRIPT: ["a"]}}).encode(), {},
     400, "application/json"),
    ("POST", "/v1/models/m:predict", b"[" * 5000, {}, 400, "application/json"),
    ("POST", "/v1/models/m:predict", b"{}", {"Content-Encoding": SCRIPT}, 400,
     "application/json"),
    ("POST", "/v1/models/m:predict", b"not gzip", {"Content-Encoding": "gzip"}, 400,
     "application/json"),
    ("POST", f"/v1/models/m:{SCRIPT}", b"{}", {}, 400, "application/json"),
    ("POST", "/v1/models/m:classify", b"{}", {}, 400, "application/json"),
    ("POST", f"/v1/models/{SCRIPT}:predict", _predict_body("a"), {}, 404, "application/json"),
    ("PUT", "/v1/models/m", b"{}", {}, 400, "application/json"),
    ("DELETE", "/v1/models/m", None, {}, 400, "application/json"),
    ("PATCH", "/v1/models/m:predict", b"{}", {}, 400, "application/json"),
    ("OPTIONS", "/v1/models/m/explain", None, {}, 400, "application/json"),
    ("HEAD", "/v1/models/m", None, {}, 400, "application/json"),
    (SCRIPT[1:7], "/v1/models/m", None, {}, 400, "application/json"),
    # statuses of a failed run
    *[("POST", "/v1/models/m:predict", _predict_body(article), {}, status, "application/json")
      for article, status in zip(INJECTED, [500, 503, 504, 429])],
]

# Raw requests waitress answers itself, before the application: (request, status).
HEAD = b"POST /v1/models/m:predict HTTP/1.1\r\nHost: x\r\n"
WAITRESS = [
    (b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\n" + b"X-" + SCRIPT.encode() * 3000
     + b": 1\r\n\r\n", 431),
    (HEAD + b"Content-Length: 100000\r\n\r\n", 413),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"4000\r\n" + b"x" * 0x4000 + b"\r\n", 413),
    (HEAD + b"Content-Length: -1\r\n\r\n", 400),
    (HEAD + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (HEAD + b"Transfer-Encoding: " + SCRIPT.encode() + b"\r\n\r\n", 501),
    (b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\n" + SCRIPT.encode() + b"\r\n\r\n", 400),
    (b"GET " + SCRIPT.encode() + b" " + SCRIPT.encode() + b"\r\n\r\n", 400),
    (b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\nBad\rHeader: 1\r\n\r\n", 400),
]


@pytest.fixture(scope="module")
def srv(tiny_model, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("headers") / "m")
    add_version(base, 1, tiny_model)
    srv = Server({"m": base}, rest_port="auto", poll_seconds=0, metrics_path=METRICS_PATH,
                 max_request_bytes=4096)  # REST bodies up to 8 KiB
    run = srv.predictor.predict

    def predict(loaded, sig, inputs, call):
        error = INJECTED.get(inputs["articles"].ravel()[0].decode())
        if error is not None:
            raise error
        return run(loaded, sig, inputs, call)

    srv.predictor.predict = predict
    yield srv
    srv.stop()


def _raw(port, data: bytes):
    """(status, {lower-case header: value}, body) of one raw request; the server closes the
    connection after it (Connection: close, or an error waitress answers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # answered and closed before everything was sent
            pass
        buf = b""
        try:
            while chunk := s.recv(65536):
                buf += chunk
        except ConnectionResetError:
            pass
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        assert name.lower() not in headers, f"{name} twice"
        headers[name.lower()] = value.strip()
    return int(lines[0].split(" ", 2)[1]), headers, body


def _check(what, status, headers, body, want_status, want_type):
    assert status == want_status, (what, status, body[:300])
    assert headers.get("x-content-type-options") == "nosniff", (what, headers)
    assert headers.get("content-type") == want_type, (what, headers)
    if want_type != "application/json":
        return
    assert b"<" not in body and b">" not in body, (what, body[:300])
    if body:  # a HEAD answer has none
        payload = json.loads(body)
        assert (status == 200) != ("error" in payload), (what, payload)
        if status != 200:
            assert len(payload["error"]) <= 500


def test_every_route_and_status_carries_the_hardened_headers(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.rest_port, timeout=60)
    seen = set()
    for method, path, body, headers, want_status, want_type in ROUTES:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        if resp.will_close:
            conn.close()
        got = {k.lower(): v for k, v in resp.getheaders()}
        _check(f"{method} {path[:60]}", resp.status, got, raw, want_status, want_type)
        seen.add(resp.status)
    conn.close()
    for data, want_status in WAITRESS:
        _check(data[:60], *_raw(srv.rest_port, data), want_status, "application/json")
        seen.add(want_status)
    assert seen >= {200, 400, 404, 413, 429, 431, 500, 501, 503, 504}


def test_request_text_is_quoted_escaped_and_cut(srv):
    status, headers, body = _raw(srv.rest_port, f"GET /v1/models/{SCRIPT}/explain HTTP/1.1\r\n"
                                                "Host: x\r\nConnection: close\r\n\r\n".encode())
    assert status == 404 and b"\\u003cscript\\u003ealert(1)\\u003c" in body
    assert "model '<script>alert(1)<' is not served" in json.loads(body)["error"]
    status, headers, body = _raw(srv.rest_port, f"GET /v1/models/{LONG} HTTP/1.1\r\n"
                                                "Host: x\r\nConnection: close\r\n\r\n".encode())
    assert status == 404 and "(1200 characters)" in json.loads(body)["error"]
    assert len(body) < 600


def test_an_application_that_raises_gets_waitress_500_in_json(srv, monkeypatch):
    def broken(environ, start_response):
        raise RuntimeError("<b>")

    monkeypatch.setattr(srv.http, "application", broken)
    status, headers, body = _raw(srv.rest_port, b"GET /v1/models/m HTTP/1.1\r\nHost: x\r\n\r\n")
    _check("a raising application", status, headers, body, 500, "application/json")
    assert "<b>" not in json.loads(body)["error"]  # no traceback either
