"""The `http` campaign's inputs (serving.fuzz_http says what runs them): one connection's
bytes as requests (`Request`, read back leniently by `parse_requests`), the seed corpus
(`http_seeds`: each route and method, bodies plain, gzipped and chunked, Expect, HEAD,
pipelining) and `HttpMutator`, which keeps most inputs well-formed requests that reach the
routes: it parses the bytes back into requests and changes one part (the method; the target,
from a table of every route, version and label form, percent-encoding and malformed path; the
version; a header added, removed, duplicated or mutated from a table of Host, Content-Length,
Transfer-Encoding, Content-Encoding, Expect, Connection... values; the JSON body through
serving.fuzz_mutators' tree mutation, gzipped or chunked, its Content-Length kept true unless a
mutation lies about it; chunk sizes; requests pipelined, dropped or added; line endings), and
leaves a share to libFuzzer's byte mutation of the whole stream.

Importing this module needs no atheris and starts nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import random
import zlib

from pgn_tf.saved_model.contract import (
    ARTICLES,
    BEAM_SIZE,
    MAX_DECODE_STEPS,
    MIN_DECODE_STEPS,
    SUMMARIZE_OPTIONS,
    SUMMARIZE_VERBOSE,
)
from tools.fuzz.fuzz_harness import LABEL, MODEL_NAME, MODEL_VERSION, TEXTS
from tools.fuzz.fuzz_loopback import METRICS_PATH
from tools.fuzz.fuzz_mutators import dump_json, mutate_json
from tools.fuzz.fuzz_protos import MutateBytes

MAX_REQUESTS = 16  # a connection's requests parse_requests reads (the rest is kept as bytes)


# -- inputs: requests ------------------------------------------------------------------------


@dataclasses.dataclass
class Request:
    """One request as bytes: its request line, header lines ((name, value), or (line, None)
    for a line without a colon), end of line, and body as sent (chunked framing included)."""

    line: bytes
    headers: list
    body: bytes = b""
    eol: bytes = b"\r\n"

    def serialize(self) -> bytes:
        lines = [self.line] + [name if value is None else name + b": " + value
                               for name, value in self.headers]
        return self.eol.join(lines) + self.eol + self.eol + self.body

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if v is not None and k.strip().lower() == name:
                return v
        return None

    def set_header(self, name: bytes, value: bytes | None) -> None:
        """Replaces every `name` header by one (None: removes them)."""
        kept = [(k, v) for k, v in self.headers if v is None or k.strip().lower() != name.lower()]
        if value is not None:
            kept.append((name, value))
        self.headers = kept


def _chunked_end(data: bytes, pos: int) -> int:
    """Where a chunked body starting at `pos` ends (its last chunk and trailers), or len."""
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return len(data)
        try:
            size = int(data[pos:eol].split(b";", 1)[0].strip(), 16)
        except ValueError:
            return len(data)
        pos = eol + 2
        if size <= 0:
            end = data.find(b"\r\n\r\n", pos - 2)
            return len(data) if end < 0 else end + 4
        pos += size + 2
        if pos > len(data):
            return len(data)


def parse_requests(data: bytes) -> tuple[list, bytes]:
    """An input's bytes -> (up to MAX_REQUESTS Requests, the bytes after them), leniently: a
    head ends at a blank line (CRLF, or LF alone), a body runs for its Content-Length (a valid
    one) or its chunked framing, else is empty."""
    out, pos = [], 0
    while pos < len(data) and len(out) < MAX_REQUESTS:
        crlf, lf = data.find(b"\r\n\r\n", pos), data.find(b"\n\n", pos)
        if crlf < 0 and lf < 0:
            break
        if crlf >= 0 and (lf < 0 or crlf <= lf):
            eol, end = b"\r\n", crlf
        else:
            eol, end = b"\n", lf
        lines = data[pos:end].split(eol)
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            headers.append((name, value.lstrip(b" ")) if sep else (line, None))
        req = Request(lines[0], headers, b"", eol)
        start = end + 2 * len(eol)
        te = (req.header(b"transfer-encoding") or b"").lower()
        length = (req.header(b"content-length") or b"").strip()
        if b"chunked" in te:
            stop = _chunked_end(data, start)
        elif length.isdigit() and len(length) < 12:
            stop = min(len(data), start + int(length))
        else:
            stop = start
        req.body = data[start:stop]
        out.append(req)
        pos = stop
    return out, data[pos:]


def chunked(body: bytes, rng: random.Random) -> bytes:
    """`body` in chunks of random sizes, then the last chunk."""
    out, pos = bytearray(), 0
    while pos < len(body):
        n = min(len(body) - pos, rng.choice((1, 7, 64, 500, 4096)))
        out += b"%x\r\n" % n + body[pos:pos + n] + b"\r\n"
        pos += n
    return bytes(out) + b"0\r\n\r\n"


def unchunked(body: bytes) -> bytes | None:
    """A chunked body's content, None when its framing is broken."""
    out, pos = bytearray(), 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(body[pos:eol].split(b";", 1)[0].strip(), 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)
        out += body[eol + 2:eol + 2 + size]
        pos = eol + 4 + size


# The request-line and header values the mutator draws from. {port}: the REST port.
METHODS = (b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"TRACE",
           b"CONNECT", b"get", b"Post", b"", b"G ET", b"X" * 100, b"\x00GET", b"GET\t")
_M = f"/v1/models/{MODEL_NAME}"
TARGETS = tuple(t.encode("latin-1") for t in (
    _M, f"{_M}/versions/{MODEL_VERSION}", f"{_M}/labels/{LABEL}", f"{_M}/metadata",
    f"{_M}/versions/{MODEL_VERSION}/metadata", f"{_M}/labels/{LABEL}/metadata", f"{_M}/explain",
    f"{_M}/versions/{MODEL_VERSION}/explain", f"{_M}/labels/{LABEL}/explain", f"{_M}:predict",
    f"{_M}/versions/{MODEL_VERSION}:predict", f"{_M}/labels/{LABEL}:predict", f"{_M}:classify",
    f"{_M}:regress", f"{_M}:", f"{_M}::predict", f"{_M}/metadata:predict",
    f"{_M}/explain:predict", f"{_M}/versions/2", f"{_M}/versions/x", f"{_M}/versions/-1",
    f"{_M}/versions/99999999999999999999", f"{_M}/versions/", f"{_M}/labels/",
    f"{_M}/labels/canary", f"{_M}/labels/%00", f"{_M}/nope", f"{_M}/versions/1/nope",
    "/v1/models/", "/v1/models", "/v1/models/nope", "/v1/models/PGN", "/v1/models//metadata",
    "/v1/models/%70gn", "/v1/models/pgn%2Fmetadata", "/v1/models/pgn%3Apredict",
    "/v1/models/%ff", "/v1/models/\xff\xfe", "/v1/models/pgn\x00", "/v1/models/pgn/../pgn",
    "//v1/models/pgn", f"{_M}?x=1", f"{_M}:predict?a=b&c", f"{_M}#frag", METRICS_PATH,
    METRICS_PATH + "?x", METRICS_PATH + "/", "/monitoring/prometheus", "/", "", "*",
    "/v1", "/v2/models/pgn", f"http://127.0.0.1{_M}", f"http://127.0.0.1{_M}:predict",
    "/" + "a" * 2000, "/v1/models/" + "x" * 300, "/v1/models/pgn/" + "%" * 10,
    "/v1/models/%E2%80%AE", "/v1/models/\u00e9",
))
VERSIONS = (b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0", b"HTTP/0.9", b"", b"http/1.1",
            b"HTTP/1.1x", b"HTTP/11", b"HTTP/1.1 extra")
HEADER_VALUES = {
    b"Host": (b"127.0.0.1:{port}", b"localhost:{port}", b"127.0.0.1", b"localhost", b"",
              b"[::1]:{port}", b"evil.example", b"127.0.0.1:99999", b"a b", b"x" * 300,
              b"127.0.0.1:{port}, evil.example"),
    b"Content-Length": (b"0", b"-1", b"+5", b" 5", b"0x10", b"1e3", b"99999999999999999999",
                        b"21000000", b"", b"1,1", b"00005"),
    b"Transfer-Encoding": (b"chunked", b"gzip", b"chunked, gzip", b"gzip, chunked",
                           b"identity", b"Chunked", b" chunked", b"chunked\x00", b"x"),
    b"Content-Encoding": (b"gzip", b"x-gzip", b"deflate", b"br", b"identity", b"",
                          b"gzip, gzip", b"GZIP", b"compress"),
    b"Content-Type": (b"application/json", b"text/plain", b"application/json; charset=latin-1",
                      b"multipart/form-data; boundary=x", b""),
    b"Expect": (b"100-continue", b"100-Continue", b"200-ok", b""),
    b"Connection": (b"close", b"keep-alive", b"upgrade", b"Upgrade, HTTP2-Settings", b""),
    b"Upgrade": (b"h2c", b"websocket"),
    b"Accept": (b"application/json", b"text/html", b"*/*"),
    b"Accept-Encoding": (b"gzip", b"identity"),
    b"X-Forwarded-For": (b"10.0.0.1", b"x" * 100),
    b"Forwarded": (b"for=10.0.0.1;proto=https",),
    b"TE": (b"trailers",),
    b"User-Agent": (b"fuzz", b"\xff\xfe"),
}
RAW_HEADER_LINES = (b"NoColonHere", b" folded continuation", b"Host : 127.0.0.1",
                    b"Content-Length : 5", b"\x00: x", b"X-\xff: y", b": empty name",
                    b"X-Long: " + b"v" * 4000)


def _bodies() -> list:
    """Valid JSON bodies of each signature, row and columnar, plain and {"b64": ...}."""
    a, b = TEXTS[0], TEXTS[2]
    b64 = base64.b64encode(b.encode()).decode()
    options = {ARTICLES: [a], BEAM_SIZE: 2, MAX_DECODE_STEPS: 4, MIN_DECODE_STEPS: 0}
    return [
        {"instances": [a, b]},
        {"instances": [{"b64": b64}]},
        {"instances": [{ARTICLES: a}]},
        {"inputs": {ARTICLES: [a]}},
        {"signature_name": SUMMARIZE_VERBOSE, "instances": [a]},
        {"signature_name": SUMMARIZE_OPTIONS, "inputs": options},
    ]


def make_request(method: bytes, target: bytes, port: int, body: bytes | None = None,
                 headers: tuple = (), version: bytes = b"HTTP/1.1") -> Request:
    """A well-formed request: Host, and Content-Length when it has a body."""
    req = Request(method + b" " + target + b" " + version,
                  [(b"Host", f"127.0.0.1:{port}".encode())] + list(headers))
    if body is not None:
        req.headers.append((b"Content-Length", str(len(body)).encode()))
        req.body = body
    return req


def http_seeds(port: int) -> list[bytes]:
    """Connections of valid requests: each route and method, the predict bodies plain,
    gzipped and chunked, Expect: 100-continue, HEAD, two pipelined requests."""
    rng = random.Random(0)
    gets = [t for t in TARGETS[:9]] + [METRICS_PATH.encode()]
    out = [make_request(b"GET", t, port).serialize() for t in gets]
    out.append(make_request(b"HEAD", TARGETS[0], port).serialize())
    for i, body in enumerate(_bodies()):
        raw = json.dumps(body).encode()
        target = TARGETS[9 + i % 3]
        out.append(make_request(b"POST", target, port, raw,
                                ((b"Content-Type", b"application/json"),)).serialize())
        if i < 2:
            z = gzip.compress(raw, mtime=0)
            out.append(make_request(b"POST", target, port, z,
                                    ((b"Content-Encoding", b"gzip"),)).serialize())
            req = make_request(b"POST", target, port, None,
                               ((b"Transfer-Encoding", b"chunked"),))
            req.body = chunked(raw, rng)
            out.append(req.serialize())
            out.append(make_request(b"POST", target, port, raw,
                                    ((b"Expect", b"100-continue"),)).serialize())
    out.append(make_request(b"GET", TARGETS[0], port).serialize()
               + make_request(b"POST", TARGETS[9], port,
                              json.dumps(_bodies()[0]).encode()).serialize())
    out.append(make_request(b"GET", TARGETS[3], port, None,
                            ((b"Connection", b"close"),)).serialize())
    return out


class HttpMutator:
    """atheris' custom mutator for `http` inputs (one connection's bytes): of its mutations,
    12 in 100 are libFuzzer's byte mutations of the whole stream, 4 a fresh valid request, the
    rest one or more structural changes of one request (module docstring).

    Args:
      port: the REST port (the Host header names it); mutate_bytes: atheris.Mutate in a
      campaign; texts: strings JSON values may become.
    """

    def __init__(self, port: int, mutate_bytes: MutateBytes, texts: tuple = TEXTS):
        self.port = port
        self.mutate_bytes = mutate_bytes
        self.texts = texts
        self.seeds = http_seeds(port)

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        r = rng.random()
        if r < 0.12:
            return self.mutate_bytes(data, max_size)
        if r < 0.16 or not data:
            return rng.choice(self.seeds)[:max_size]
        requests, tail = parse_requests(data)
        if not requests:
            return self.mutate_bytes(data, max_size)
        for _ in range(1 + int(rng.expovariate(1.2))):
            self._one(requests, rng, max_size)
            if not requests:
                requests.append(parse_requests(rng.choice(self.seeds))[0][0])
        if rng.random() < 0.9:
            tail = b""  # bytes after the requests: mostly dropped, else kept as they are
        out = b"".join(r.serialize() for r in requests) + tail
        if rng.random() < 0.03:
            out = out[:rng.randrange(len(out) + 1)]  # the connection ends mid-request
        return out[:max_size]

    def _value(self, name: bytes, rng: random.Random) -> bytes:
        return rng.choice(HEADER_VALUES[name]).replace(b"{port}", str(self.port).encode())

    def _one(self, requests: list, rng: random.Random, max_size: int) -> None:
        i = rng.randrange(len(requests))
        req = requests[i]
        parts = req.line.split(b" ", 2) + [b"", b""]
        method, target, version = parts[0], parts[1], parts[2]
        kind = rng.choices(range(14), (2, 4, 1, 3, 1.5, 1.5, 0.5, 5, 1, 1, 1, 1, 1.5, 0.3))[0]
        if kind == 0:  # a method the API knows, two times in three
            method = rng.choice(METHODS[:3] if rng.random() < 0.67 else METHODS)
        elif kind == 1:
            target = rng.choice(TARGETS) if rng.random() < 0.8 else self.mutate_bytes(
                target, max(16, 2 * len(target)))
        elif kind == 2:
            version = rng.choice(VERSIONS[:2] if rng.random() < 0.5 else VERSIONS)
        elif kind == 3:  # a header from the table, or a malformed line
            if rng.random() < 0.15:
                req.headers.insert(rng.randint(0, len(req.headers)),
                                   (rng.choice(RAW_HEADER_LINES), None))
            else:
                name = rng.choice(list(HEADER_VALUES))
                value = self._value(name, rng)
                if rng.random() < 0.5:
                    req.set_header(name, value)
                else:
                    req.headers.insert(rng.randint(0, len(req.headers)), (name, value))
        elif kind == 4 and req.headers:
            del req.headers[rng.randrange(len(req.headers))]
        elif kind == 5 and req.headers:
            j = rng.randrange(len(req.headers))
            k, v = req.headers[j]
            if v is None:
                req.headers[j] = (self.mutate_bytes(k, max(16, 2 * len(k))), None)
            else:
                req.headers[j] = (k, self.mutate_bytes(v, max(16, 2 * len(v))))
        elif kind == 6 and req.headers:
            req.headers.insert(rng.randint(0, len(req.headers)), rng.choice(req.headers))
        elif kind == 7:
            self._body(req, rng, max_size)
        elif kind == 8:
            self._framing(req, rng)
        elif kind == 9:  # Content-Length lies
            length = req.header(b"content-length")
            n = len(req.body)
            value = rng.choice((str(n + rng.choice((-2, -1, 1, 5))).encode(),
                                self._value(b"Content-Length", rng)))
            req.set_header(b"Content-Length", value if length is not None or rng.random() < 0.5
                           else None)
        elif kind == 10:  # pipelining
            r = rng.random()
            if r < 0.4 and len(requests) < MAX_REQUESTS:
                requests.insert(rng.randint(0, len(requests)), Request(
                    req.line, list(req.headers), req.body, req.eol))
            elif r < 0.6 and len(requests) > 1:
                del requests[i]
            elif len(requests) < MAX_REQUESTS:
                requests.insert(rng.randint(0, len(requests)),
                                parse_requests(rng.choice(self.seeds))[0][0])
            return
        elif kind == 11:
            req.eol = b"\n" if req.eol == b"\r\n" else b"\r\n"
        elif kind == 12:  # a chunk size that lies, or framing bytes mutated
            if b"\r\n" in req.body:
                req.body = self.mutate_bytes(req.body, max(16, 2 * len(req.body)))
            else:
                req.body = rng.choice((b"5\r\nab\r\n0\r\n\r\n", b"fffffffffffffffff\r\n",
                                       b"-1\r\n", b"0x5\r\nhello\r\n0\r\n\r\n",
                                       b"5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n", b"0\r\n"))
        else:
            if len(requests) > 1:
                del requests[i]
            return
        req.line = b" ".join(p for p in (method, target, version) if p or rng.random() < 0.1)

    def _body(self, req: Request, rng: random.Random, max_size: int) -> None:
        """A structural change of a JSON body (inflated and re-framed as it was sent), its
        Content-Length kept true where it was."""
        honest = req.header(b"content-length") == str(len(req.body)).encode()
        is_chunked = b"chunked" in (req.header(b"transfer-encoding") or b"").lower()
        is_gzip = (req.header(b"content-encoding") or b"").strip().lower() in (b"gzip",
                                                                              b"x-gzip")
        raw = unchunked(req.body) if is_chunked else req.body
        if raw is not None and is_gzip:
            try:
                raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 4 * max_size)
            except zlib.error:
                raw = None
        try:
            body = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError):
            body = None
        if body is None or rng.random() < 0.1:
            body = rng.choice(_bodies())
        try:
            new = dump_json(mutate_json(body, rng, self.mutate_bytes, self.texts, max_size), rng)
        except (ValueError, TypeError, RecursionError):
            return
        if is_gzip:
            new = gzip.compress(new, compresslevel=rng.choice((1, 9)), mtime=0)
        if is_chunked:
            new = chunked(new, rng)
        if len(new) > max_size:
            return
        req.body = new
        if honest:
            req.set_header(b"Content-Length", str(len(new)).encode())

    def _framing(self, req: Request, rng: random.Random) -> None:
        """Between Content-Length, chunked and gzip, keeping the request honest."""
        is_chunked = b"chunked" in (req.header(b"transfer-encoding") or b"").lower()
        if rng.random() < 0.5:  # chunked <-> Content-Length
            if is_chunked:
                raw = unchunked(req.body) or b""
                req.set_header(b"Transfer-Encoding", None)
                req.set_header(b"Content-Length", str(len(raw)).encode())
                req.body = raw
            else:
                req.set_header(b"Content-Length", None)
                req.set_header(b"Transfer-Encoding", b"chunked")
                req.body = chunked(req.body, rng)
            return
        raw = unchunked(req.body) if is_chunked else req.body
        if raw is None:
            return
        if (req.header(b"content-encoding") or b"").strip().lower() == b"gzip":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error):
                return
            req.set_header(b"Content-Encoding", None)
        else:
            raw = gzip.compress(raw, mtime=0)
            req.set_header(b"Content-Encoding", b"gzip")
        req.body = chunked(raw, rng) if is_chunked else raw
        if not is_chunked:
            req.set_header(b"Content-Length", str(len(raw)).encode())
