"""TF Serving's REST API as a WSGI application, served by waitress.

    GET  /v1/models/NAME[/versions/V | /labels/L]            model status
    GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signature defs
    POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": ...} or {"inputs": ...}
    GET  /monitoring/prometheus/metrics                       (with --monitoring_config_file)
    GET  /v1/models/NAME[/versions/V | /labels/L]/explain    the explanation page (serving.explain;
                                                              off with --no_explain_page)

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
complete requests reach this application, on a bounded pool of `threads`.

A body's JSON values are counted before it is parsed (`json_value_bound`): Python's parser
builds an object for each of them (an empty `{}` costs 64 bytes, 20 times its text), so a body
under the byte cap could still cost gigabytes. A body of more than `--rest_api_max_json_values`
values is refused at once with 400, its parse memory bounded by that count.

With `--rest_api_allowed_hosts` (off by default, as in TF Serving), a request whose Host header
names none of the listed hosts is answered 421 before any routing: a web page whose own name an
attacker re-points at this server's address (DNS rebinding) sends its name as the Host, so the
browser's same-origin rule alone does not keep that page from a server on loopback.

Errors are `{"error": "..."}` with TF Serving's HTTP status for the gRPC code (serving.status),
and so are waitress' own refusals (400, 413, 431, 501, 500: `_JsonErrorTask`). Every response
says what it is: `Content-Type: application/json` (the explanation page its HTML, the metrics
Prometheus' text) and `X-Content-Type-Options: nosniff`, so a browser never reads a JSON body,
which may quote a request's text, as a page; in JSON bodies `<`, `>` and `&` are written as
`\\u003c`, `\\u003e`, `\\u0026` besides. The version a request names is resolved once, so a swap in
between cannot answer 404.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterable

import numpy as np
from google.protobuf import json_format
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask

from pgn_tf.serving import explain
from pgn_tf.serving.cancel import Call
from pgn_tf.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from pgn_tf.serving.metrics import Metrics
from pgn_tf.serving.models import ModelRegistry
from pgn_tf.serving.predict import DEFAULT_SIGNATURE, Predictor
from pgn_tf.serving.status import HTTP_STATUS, Code, echo, from_exception, invalid, not_found

log = logging.getLogger("serving")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 412: "Precondition Failed", 421: "Misdirected Request",
            429: "Too Many Requests", 499: "Client Closed Request", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable", 504: "Gateway Timeout"}
# On every response, whatever its status or route (a browser must not guess a type).
HARDENED_HEADERS = [("X-Content-Type-Options", "nosniff")]
JSON_CONTENT_TYPE = "application/json"


def json_body(payload) -> bytes:
    """`payload` as JSON whose text has no "<", ">" or "&" (escaped as \\u003c, ...): a body
    quoting a request's text stays inert even where something renders it as HTML."""
    text = json.dumps(payload)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def _json_value(v):
    """numpy outputs -> JSON values (bytes as UTF-8 text, as TF Serving does for non-binary
    outputs)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray):
        return [_json_value(x) for x in v] if v.ndim else _json_value(v.item())
    if isinstance(v, np.generic):
        return v.item()
    return v


class _Route:
    __slots__ = ("name", "version", "label", "tail", "verb")

    def __init__(self, name, version, label, tail, verb):
        self.name, self.version, self.label, self.tail, self.verb = name, version, label, tail, verb


# A JSON string: quotes around anything but a quote or a backslash, or an escaped character.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_value_bound(raw: bytes) -> int:
    """At least the number of JSON values and object keys in `raw` (valid JSON or not): each
    but the first follows a comma, a colon or an opening bracket outside strings. Runs in C over
    the bytes (a regular expression and bytes.count), whatever their nesting."""
    bare = _JSON_STRING.sub(b'""', raw)
    return 1 + sum(bare.count(c) for c in (b",", b":", b"[", b"{"))


def gunzip_bounded(stream, length: int, limit: int, chunk: int = 64 * 1024) -> bytearray:
    """Inflates a gzip body of `length` bytes read from `stream` a chunk at a time, refusing it
    (INVALID_ARGUMENT) as soon as it inflates past `limit` bytes: it costs at most what an
    uncompressed body at the cap costs, never what it would inflate to. Each step inflates at
    most 4 chunks into one growing buffer (one large step would hold its output twice while it
    is appended)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip's header and trailer
    out, left = bytearray(), length
    while left > 0:
        data = stream.read(min(chunk, left))
        if not data:
            raise invalid("the request body ended early")
        left -= len(data)
        if inflater.eof:
            raise invalid("the request body has bytes after the end of its gzip stream")
        try:
            while data:
                out += inflater.decompress(data, min(limit + 1 - len(out), 4 * chunk))
                if len(out) > limit:
                    raise invalid(f"the gzip request body inflates to more than {limit} bytes, "
                                  "the server's body cap (twice --max_request_bytes)")
                data = inflater.unconsumed_tail
        except zlib.error as e:
            raise invalid(f"the request body is not valid gzip: {str(e)[:100]}") from None
        if inflater.eof and inflater.unused_data:
            raise invalid("the request body has bytes after the end of its gzip stream")
    if not inflater.eof:
        raise invalid("the gzip request body is truncated")
    return out


def parse_model_path(path: str) -> _Route:
    """'/v1/models/NAME[/versions/V|/labels/L][/metadata][:verb]' -> _Route; RequestError."""
    rest = path[len("/v1/models/"):]
    verb = None
    if ":" in rest:
        rest, verb = rest.rsplit(":", 1)
    parts = rest.split("/")
    name, version, label, tail = parts[0], None, None, parts[1:]
    if not name:
        raise not_found("no model name in the path")
    if len(tail) >= 2 and tail[0] == "versions":
        if not (tail[1].isascii() and tail[1].isdigit() and len(tail[1]) <= 19):
            raise invalid(f"bad version '{tail[1][:40]}' in the path: versions are numbers")
        version, tail = int(tail[1]), tail[2:]
    elif len(tail) >= 2 and tail[0] == "labels":
        if not tail[1]:
            raise invalid("empty version label in the path")
        label, tail = tail[1], tail[2:]
    return _Route(name, version, label, tail, verb)


def _split_host(text: str) -> tuple[str, str | None]:
    """'name', 'name:port', '[v6]' or '[v6]:port' -> (host lowercased, no trailing dot; port or
    None); ValueError for anything else."""
    text = text.strip().lower()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(text)
        port = rest[1:] if rest else None
    elif text.count(":") > 1:  # an IPv6 address without brackets: its port cannot be told apart
        raise ValueError(text)
    else:
        host, _, port = text.partition(":")
        port = port if ":" in text else None
    host = host[:-1] if host.endswith(".") else host
    if not host or any(c in host for c in "/@?#% \t") or (
            port is not None and not (port.isascii() and port.isdigit()
                                      and 0 < int(port) < 65536)):
        raise ValueError(text)
    return host, port


def parse_allowed_hosts(entries: Iterable[str]) -> frozenset[tuple[str, str | None]]:
    """--rest_api_allowed_hosts' entries (host names or addresses, each with or without a port;
    an IPv6 address in brackets) -> {(host, port or None for any port)}; ValueError naming a
    malformed entry."""
    out = set()
    for entry in entries:
        try:
            out.add(_split_host(entry))
        except ValueError:
            raise ValueError(f"--rest_api_allowed_hosts entry '{entry[:80]}' is not a host name "
                             "or address, host:port, [IPv6] or [IPv6]:port") from None
    return frozenset(out)


def host_allowed(header: str | None, allowed: frozenset[tuple[str, str | None]]) -> bool:
    """Whether a request's Host header names one of `allowed` (parse_allowed_hosts); a request
    without one, or with a malformed one, is not allowed."""
    try:
        host, port = _split_host(header or "")
    except ValueError:
        return False
    return (host, None) in allowed or (host, port) in allowed


class RestApp:
    """The WSGI application.

    Args:
      predictor, registry, metrics: the server's parts; metrics_path: where the Prometheus
      text is served (None: not served); timeout_s: each request's deadline
      (--rest_api_timeout_in_ms); explain_page: whether GET .../explain serves the
      explanation page (serving.explain); max_json_values: the JSON values a body may hold
      (--rest_api_max_json_values; 0: no limit); max_body_bytes: the body cap, which a gzip
      body (Content-Encoding: gzip) may not inflate past either; allowed_hosts: the Host
      headers answered (--rest_api_allowed_hosts, parse_allowed_hosts), others 421 before any
      routing (empty: every Host).
    """

    def __init__(self, predictor: Predictor, registry: ModelRegistry, metrics: Metrics | None,
                 metrics_path: str | None, timeout_s: float | None, explain_page: bool = True,
                 max_json_values: int = 2**20, max_body_bytes: int = 20 * 2**20,
                 allowed_hosts: Iterable[str] = ()):
        self.allowed_hosts = parse_allowed_hosts(allowed_hosts)
        self.max_json_values = max_json_values
        self.max_body_bytes = max_body_bytes
        self.predictor = predictor
        self.registry = registry
        self.metrics = metrics
        self.metrics_path = metrics_path
        self.timeout_s = timeout_s
        self.explain_page = explain_page

    def __call__(self, environ, start_response):
        def start_hardened(status, headers, *exc_info):
            return start_response(status, headers + HARDENED_HEADERS, *exc_info)

        if self.allowed_hosts and not host_allowed(environ.get("HTTP_HOST"), self.allowed_hosts):
            body = self._misdirected(environ.get("HTTP_HOST"), start_hardened)
        else:
            body = self._respond(environ, start_hardened)
        # waitress sends whatever body the application returns, a HEAD answer's too, where the
        # client reads none: the rest would be read as the next response on the connection
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else body

    def _misdirected(self, host: str | None, start_response) -> list[bytes]:
        """421 for a Host this server was not told to answer (DNS rebinding: a page whose name
        now resolves here), before the path is looked at."""
        named = f"Host '{echo(host)}'" if host else "a request without a Host header"
        body = json_body({"error": f"{named} is not one this server answers to; "
                                   "--rest_api_allowed_hosts lists those it does"})
        start_response("421 Misdirected Request", [("Content-Type", JSON_CONTENT_TYPE),
                                                   ("Content-Length", str(len(body)))])
        return [body]

    def _respond(self, environ, start_response):
        started = time.perf_counter()
        method = environ.get("REQUEST_METHOD", "GET")
        # WSGI gives the path as latin-1 text of the raw (percent-decoded) bytes.
        raw_path = environ.get("PATH_INFO", "")
        model, seen, api, code, payload = "", {}, "other", Code.OK, None
        try:
            try:
                path = raw_path.encode("latin-1").decode("utf-8")
            except UnicodeError:
                raise invalid("the request path is not UTF-8") from None
            if self.metrics_path and path == self.metrics_path:
                if method != "GET":
                    raise invalid(f"{self.metrics_path} takes GET")
                body = self.metrics.exposition()
                start_response("200 OK", [("Content-Type", METRICS_CONTENT_TYPE),
                                          ("Content-Length", str(len(body)))])
                return [body]
            if not path.startswith("/v1/models/"):
                raise not_found("unknown path; TF Serving's REST API is under /v1/models/")
            route = parse_model_path(path)
            served = self.registry.model(route.name)
            model = served.name
            if route.tail == ["explain"] and not route.verb:
                return self._explain(served, route, method, start_response)
            if method == "POST":
                api = "predict"
                payload = self._predict(environ, route, seen)
            elif method == "GET":
                api = "metadata" if route.tail == ["metadata"] else "status"
                payload = self._get(served, route, seen)
            else:
                raise invalid(f"method {method[:20]} is not supported; use GET or POST")
        except Exception as e:  # noqa: BLE001  (every failure becomes a proper status)
            err = from_exception(e)
            if err.code == Code.INTERNAL:
                log.exception("REST request failed")
            code, payload = err.code, {"error": err.message}
        finally:
            if self.metrics is not None and api != "other":
                self.metrics.observe_request(model, seen.get("version"), api, "rest", code.name,
                                             started)
        status = HTTP_STATUS.get(code, 500)
        body = json_body(payload)
        start_response(f"{status} {_REASONS.get(status, 'Error')}",
                       [("Content-Type", JSON_CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    # -- GET .../explain: the explanation page ----------------------------------------------

    def _explain(self, served, route: _Route, method: str, start_response):
        if not self.explain_page:
            raise not_found("the explanation page is off on this server (--no_explain_page)")
        if method != "GET":
            raise invalid(f"{method[:20]} .../explain: the explanation page takes GET")
        loaded = served.resolve(route.version, route.label)
        body = explain.page(served.name, route.version, route.label, loaded.path)
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                  ("Content-Length", str(len(body))),
                                  ("Content-Security-Policy", explain.CSP),
                                  ("Cache-Control", "no-store")])
        return [body]

    # -- GET: status and metadata -----------------------------------------------------------

    def _get(self, served, route: _Route, seen: dict):
        if route.verb:
            raise invalid(f":{route.verb[:40]} needs POST")
        if route.tail == ["metadata"]:
            loaded = served.resolve(route.version, route.label)
            seen["version"] = loaded.version
            sigs = {k: json_format.MessageToDict(v) for k, v in loaded.signature_defs.items()}
            return ({"model_spec": {"name": loaded.name, "signature_name": "",
                                    "version": str(loaded.version)},
                     "metadata": {"signature_def": {"signature_def": sigs}}})
        if route.tail:
            raise not_found("unknown path under /v1/models/NAME")
        want = route.version
        if route.label is not None:
            want = served.resolve(label=route.label).version
        statuses = [{"version": str(v), "state": s,
                     "status": {"error_code": "UNKNOWN" if m else "OK", "error_message": m}}
                    for v, s, m in served.status() if want is None or v == want]
        if not statuses:
            raise not_found(f"version {want} of model '{served.name}' is unknown")
        seen["version"] = want
        return {"model_version_status": statuses}

    # -- POST :predict ----------------------------------------------------------------------

    def _read_body(self, environ) -> bytes | bytearray:
        """The body as sent, or inflated when its Content-Encoding is gzip."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise invalid("bad Content-Length") from None
        encoding = environ.get("HTTP_CONTENT_ENCODING", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            return gunzip_bounded(environ["wsgi.input"], length, self.max_body_bytes)
        if encoding not in ("", "identity"):
            raise invalid(f"Content-Encoding '{echo(encoding)}' is not supported; send gzip or "
                          "an uncompressed body")
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        if len(raw) != length:
            raise invalid("the request body ended early")
        return raw

    def _read_json(self, environ) -> dict:
        raw = self._read_body(environ)
        if self.max_json_values and json_value_bound(raw) > self.max_json_values:
            raise invalid(f"the request body holds more than the server's "
                          f"--rest_api_max_json_values={self.max_json_values} JSON values; send "
                          "fewer or larger values, or use gRPC")
        try:
            body = json.loads(raw.decode("utf-8"))
        except ValueError as e:  # not UTF-8, not JSON, or an integer of over 4,300 digits
            raise invalid(f"request body is not valid UTF-8 JSON: {str(e)[:200]}") from None
        except RecursionError:
            raise invalid("request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise invalid("request body must be a JSON object")
        return body

    def _predict(self, environ, route: _Route, seen: dict):
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        if route.verb != "predict" or route.tail:
            if route.verb in ("classify", "regress"):
                raise invalid(f":{route.verb} is not supported by this server; use :predict")
            raise invalid("unsupported POST path (use /v1/models/NAME[/versions/V]:predict)")
        body = self._read_json(environ)
        sig_name = body.get("signature_name") or DEFAULT_SIGNATURE
        if not isinstance(sig_name, str):
            raise invalid("signature_name must be a string")
        loaded = self.predictor.resolve(route.name, route.version, route.label)  # once
        seen["version"] = loaded.version
        sig = self.predictor.signature(loaded, sig_name)
        if ("instances" in body) == ("inputs" in body):
            raise invalid("request needs exactly one of 'instances' or 'inputs'")
        names = list(sig.inputs)
        if "instances" in body:  # row format: a list of rows, or of {input: row} objects
            inst = body["instances"]
            if not isinstance(inst, list):
                raise invalid("'instances' must be a list")
            if inst and all(isinstance(x, dict) for x in inst) and not (
                    len(names) == 1 and set(inst[0]) == {"b64"}):
                keys = set().union(*(x.keys() for x in inst))
                self.predictor.check_names(sig, keys)
                if any(set(x) != keys for x in inst):
                    raise invalid("every instance must name the same inputs")
                values = {k: [x[k] for x in inst] for k in keys}
            elif len(names) == 1:
                values = {names[0]: inst}
            else:
                raise invalid(f"signature '{sig.name}' takes inputs {sorted(names)}: each "
                              "instance must be an object naming them")
        else:  # columnar format
            raw_inputs = body["inputs"]
            one_b64 = len(names) == 1 and isinstance(raw_inputs, dict) and set(raw_inputs) == {"b64"}
            if isinstance(raw_inputs, dict) and not one_b64:
                values = raw_inputs
            elif len(names) == 1:
                values = {names[0]: raw_inputs}
            else:
                raise invalid("'inputs' must name each input of this signature")
        inputs = self.predictor.inputs_from_json(loaded, sig, values)
        outputs = self.predictor.predict(loaded, sig, inputs, Call(deadline))
        if "instances" in body:
            out_names = list(outputs)
            n = len(next(iter(outputs.values()))) if outputs else 0
            if len(out_names) == 1:
                preds = [_json_value(outputs[out_names[0]][i]) for i in range(n)]
            else:
                preds = [{k: _json_value(outputs[k][i]) for k in out_names} for i in range(n)]
            return {"predictions": preds}
        outs = {k: _json_value(v) for k, v in outputs.items()}
        return {"outputs": outs if len(outs) > 1 else next(iter(outs.values()))}


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
    """The client a connection is counted against for the per-client cap: its IPv4 address
    (an IPv4-mapped IPv6 one too), or the /64 an IPv6 address lies in (one host is given a /64
    and may take any address in it)."""
    try:
        ip = ipaddress.ip_address(addr[0])
    except (ValueError, TypeError, IndexError):
        return str(addr)
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


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
    cleared when a complete request goes to a worker; `_Server.maintenance` times it out."""

    parser_class = _StrictParser
    error_task_class = _JsonErrorTask
    request_started: float | None = None
    _counted = False

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

    def shed(self, max_connections: int) -> None:
        """On the I/O loop, no request of this connection being served: closes it now to make
        room for a new one (`_Server.handle_accept`). An unfinished request is answered 408, as
        at its deadline; a connection between requests closes silently, as at its idle
        time-out (a client must be ready for that on an idle keep-alive connection)."""
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
    """waitress' TCP server with the three bounds a trickling client meets (module docstring):
    the request deadline, checked in `maintenance` (waitress runs it every `cleanup_interval`,
    here 1 s, beside its own idle check), the per-client cap, checked at accept, and shedding at
    the connection cap (`handle_accept`): many addresses, each within its cap, can still fill
    `connection_limit`, and waitress would then stop accepting, leaving every new connection in
    the listen backlog until one closes."""

    channel_class = _StrictChannel

    def __init__(self, app, adj: Adjustments, socket_map: dict, request_timeout_s: float,
                 max_connections_per_client: int):
        self.request_timeout_s = request_timeout_s
        self.max_connections_per_client = max_connections_per_client
        self._per_client: dict[str, int] = {}
        self._count_lock = threading.Lock()  # channels close on the I/O loop and in stop()
        self.refused_connections = 0  # by the per-client cap
        self.timed_out_requests = 0
        self.shed_connections = 0  # closed at the connection cap to make room, idle ones too
        self.shed_idle_connections = 0  # of those, the ones between requests
        self.max_connections = adj.connection_limit - _OWN_SOCKETS
        self._next_shed_check = 0.0  # monotonic: at the cap, listen again from then
        self._accept_error_logged = self._full_logged = 0.0
        super().__init__(app, map=socket_map, adj=adj)

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
        says when to look again): the one whose unfinished request started longest ago, at least
        `_SHED_GRACE_S` ago; else the one idle between requests longest, at least
        `_SHED_IDLE_GRACE_S`. Never one with a request queued or being served, a response still
        being written, or already closing. One pass over the open connections."""
        now, wall = time.monotonic(), time.time()
        oldest = idlest = None  # (started, channel), (last activity, channel)
        for channel in self.active_channels.values():
            if channel.requests or channel.will_close or channel.close_when_flushed:
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
                        "closes the oldest unfinished request over %g s old (or idle connection "
                        "over %g s), %d so far, or waits in the listen backlog while there is "
                        "none", self.max_connections, _SHED_GRACE_S, _SHED_IDLE_GRACE_S,
                        self.shed_connections)

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
                self.shed_idle_connections += victim.request_started is None
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
        super().maintenance(now)  # idle connections (between requests, or before the first)
        cutoff = time.monotonic() - self.request_timeout_s
        for channel in list(self.active_channels.values()):
            started = channel.request_started
            if (started is not None and started < cutoff and not channel.requests
                    and not channel.will_close and not channel.close_when_flushed):
                self.timed_out_requests += 1
                channel.time_out_request(self.request_timeout_s)


def make_server(app: RestApp, host: str, port: int, threads: int, connection_limit: int,
                channel_timeout_s: float, max_body_bytes: int, socket_map: dict, *,
                request_timeout_s: float, max_connections_per_client: int):
    """A waitress server for `app` (not started: call .run() on a thread). Its I/O loop runs
    while `socket_map` holds channels: `waitress.wasyncore.close_all(socket_map)` ends it.

    Args:
      connection_limit: open connections at most (--rest_api_max_connections);
      channel_timeout_s: an idle connection's life (--rest_api_idle_timeout_seconds);
      request_timeout_s: a request's, from its first byte until it is complete
      (--rest_api_request_read_timeout_seconds); max_connections_per_client: open connections
      of one client address (--rest_api_max_connections_per_client).
    """
    adj = Adjustments(
        host=host, port=port, threads=threads,
        connection_limit=connection_limit + _OWN_SOCKETS,
        channel_timeout=max(1, round(channel_timeout_s)),
        cleanup_interval=1,  # how often idle connections and late requests are closed
        max_request_body_size=max_body_bytes + 1,  # waitress refuses at >= the limit
        max_request_header_size=64 * 1024, asyncore_use_poll=True,  # poll: no 1,024-fd limit
        backlog=2048, expose_tracebacks=False, ident="pgn_tf-serving")
    return _Server(app, adj, socket_map, request_timeout_s, max_connections_per_client)
