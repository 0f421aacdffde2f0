"""TF Serving's REST API as a WSGI application, served by waitress.

    GET  /v1/models/NAME[/versions/V | /labels/L]            model status
    GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signature defs
    POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": ...} or {"inputs": ...}
    GET  /monitoring/prometheus/metrics                       (with --monitoring_config_file)
    GET  /v1/models/NAME[/versions/V | /labels/L]/explain    the explanation page (serving.explain;
                                                              off with --no_explain_page)

The HTTP itself (waitress, and the bounds on what a connection may hold: the request deadline,
the per-client cap, shedding at the connection cap, the strict parser and waitress' own
refusals in this API's error form) is serving.rest_transport; only complete requests reach this
application.

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

import json
import logging
import re
import time
import zlib
from collections.abc import Iterable

import numpy as np
from google.protobuf import json_format

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
