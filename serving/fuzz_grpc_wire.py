"""The gRPC transport fuzzed (serving.fuzz's `grpc_wire` campaign): HTTP/2 streams written
frame by frame (h2, a pure-Python HTTP/2 library) to the real gRPC server on loopback, so the
fuzz reaches what a client library never sends: the 5-byte message prefix (its compressed flag
and its length, true or lying), grpc-encoding (gzip, deflate, identity, unknown) over valid and
corrupt payloads, messages around the receive limit, every method path, and malformed headers.

An input is a 12-byte header of choices and a serialized request message (`Wire.parse`):

    0 path (PATHS)           1 grpc-encoding (ENCODINGS)      2 framing bits (FRAMING_*)
    3 the compressed flag's byte, for FLAG_BYTE    4-7 a signed delta to the length prefix
    8 size (SIZES: the message padded to around the receive limit; gzipped, a bomb)
    9 header bits (HEADER_*)  10 grpc-timeout (TIMEOUTS)       11 metadata (METADATA)

Each input opens a connection of its own (its HPACK and flow-control state start fresh, so an
input is answered the same way each time), sends the stream (and a second message, frames
split, client trailers, RST_STREAM instead of the end of the stream, a truncated message, as
its bits say), reads until the stream is answered or reset or the connection ends, and
closes.

`check` raises `Finding` for: an honest stream (true framing, a known encoding, well-formed
headers: `Wire.honest`) answered with anything but a status a client's request may get
(HONEST_CODES) or not answered within `answer_timeout_s`; an OK whose body
is not one response message of the method; an error message longer than serving.status allows
or naming the export's path. A dishonest stream may be refused in any way gRPC chooses (a
status, RST_STREAM, GOAWAY, or late: `WireHarness` waits `dishonest_wait_s` for it): what it must not do
is reach the handlers wrongly, which the server's error log shows
(fuzz_loopback.LoopbackServer.end_input), or take the server down, which the next honest
stream's answer shows.

Importing this module needs no atheris and starts nothing; h2 is imported where a campaign
starts (the fuzz and test extras install it).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import random
import select
import socket
import struct
import time
import urllib.parse
import zlib

from pgn_tf.serving.fuzz_harness import GRPC_METHODS, Finding
from pgn_tf.serving.fuzz_loopback import answer_feature, answer_key
from pgn_tf.serving.fuzz_protos import MutateBytes, mutate_message

HEADER_BYTES = 12
_PS = "/tensorflow.serving.PredictionService/"
_MS = "/tensorflow.serving.ModelService/"
# (path, index into fuzz_harness.GRPC_METHODS of the request it carries)
PATHS = (
    (_PS + "Predict", 0), (_PS + "GetModelMetadata", 1), (_MS + "GetModelStatus", 2),
    (_PS + "Classify", 3), (_PS + "Regress", 0), (_PS + "MultiInference", 0),
    (_PS + "GetModelStatus", 2), (_MS + "HandleReloadConfigRequest", 2), (_MS + "Predict", 0),
    ("/", 0), ("", 0), (_PS, 0), (_PS + "predict", 0), (_PS + "Predict/", 0),
    (_PS + "Predict?x=1", 0), ("Predict", 0), ("/" + "x" * 2000, 0),
    ("/grpc.health.v1.Health/Check", 0),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", 0),
    (_PS + "Predict\x00", 0), (_PS + "Pr%65dict", 0), ("/tensorflow.serving.PredictionService", 0),
)
SERVED_PATHS = 3  # PATHS[:3] are the methods the server serves
ENCODINGS = (None, "identity", "gzip", "deflate", "snappy", "br", "", "gzip, deflate", "GZIP",
             "x" * 100, "stream/gzip", "zstd")
KNOWN_ENCODINGS = (None, "identity", "gzip", "deflate")
FLAG_HONEST, FLAG_SET_RAW, FLAG_CLEAR_COMPRESSED, FLAG_BYTE = 0, 1, 2, 3
FRAMING_CORRUPT = 1 << 2  # a byte of the compressed payload flipped
FRAMING_SPLIT = 1 << 3  # the message over many DATA frames
FRAMING_TWO = 1 << 4  # a second message on a unary stream
FRAMING_RESET = 1 << 5  # RST_STREAM(CANCEL) instead of the end of the stream
FRAMING_TRAILERS = 1 << 6  # the client ends its side with trailers
FRAMING_TRUNCATE = 1 << 7  # half the message sent, then the end of the stream
# what the size byte pads the message to, relative to the server's receive limit L (with gzip
# or deflate, megabytes of zeros are a few kB on the wire: a compression bomb)
SIZES = ("none", "L-1", "L", "L+1", "4MiB", "L+4096", "64KiB", "16KiB+1")
CONTENT_TYPES = ("application/grpc", "application/grpc+proto", "application/grpc+json",
                 "text/plain", None, "application/grpcx", "application/grpc; charset=utf-8",
                 "APPLICATION/GRPC")
HEADER_NO_TE = 1 << 3
HEADER_GET = 1 << 4
HEADER_HTTPS = 1 << 5
HEADER_NO_AUTHORITY = 1 << 6
HEADER_BAD_NAME = 1 << 7  # an upper-case name and a connection-specific header: not HTTP/2
TIMEOUTS = (None, "99999999H", "100S", "1S", "0n", "1n", "1X", "-1S", "1", "", "1000000000n",
            "10m")
HONEST_TIMEOUTS = 4  # TIMEOUTS[:4]: valid ones long enough for an answer
METADATA = (
    (), (("x-bin", "!!!not base64"),), (("x-bin", "YWJj"),), (("x-long", "v" * 8000),),
    (("x-huge", "v" * 17000),), tuple((f"x-{i}", "v") for i in range(100)),
    (("grpc-foo", "reserved"),), (("user-agent", "\xff\xfe"),),
    (("grpc-accept-encoding", "gzip"),), (("authorization", "Bearer x"),),
    (("x-empty", ""),), (("x-nul", "a\x00b"),),
)
HONEST_METADATA = (0, 2, 8, 9, 10)
# Statuses an honest stream may get: the API's refusals (serving.status), UNIMPLEMENTED for a
# method not served, RESOURCE_EXHAUSTED past the receive limit, DEADLINE_EXCEEDED.
HONEST_CODES = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE",
                          "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED",
                          "DEADLINE_EXCEEDED"})
_CODE_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
               "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
               "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
               "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


@dataclasses.dataclass
class Wire:
    """One input's choices (module docstring) and its request message's bytes."""

    path: int = 0
    encoding: int = 0
    framing: int = 0
    flag_byte: int = 0
    delta: int = 0
    size: int = 0
    headers: int = 0
    timeout: int = 0
    metadata: int = 0
    payload: bytes = b""

    @classmethod
    def parse(cls, data: bytes) -> Wire:
        head = data[:HEADER_BYTES].ljust(HEADER_BYTES, b"\x00")
        return cls(head[0] % len(PATHS), head[1] % len(ENCODINGS), head[2], head[3],
                   struct.unpack("<i", head[4:8])[0], head[8] % len(SIZES), head[9],
                   head[10] % len(TIMEOUTS), head[11] % len(METADATA), data[HEADER_BYTES:])

    def serialize(self) -> bytes:
        return bytes([self.path, self.encoding, self.framing, self.flag_byte]) + struct.pack(
            "<i", self.delta) + bytes([self.size, self.headers, self.timeout,
                                       self.metadata]) + self.payload

    @property
    def request_index(self) -> int:
        return PATHS[self.path][1]

    def honest(self) -> bool:
        """True framing, a known encoding, well-formed headers and a valid timeout: a stream
        any client library could send."""
        return (self.framing & 0b11 == FLAG_HONEST
                and not self.framing & (FRAMING_CORRUPT | FRAMING_TWO | FRAMING_RESET
                                        | FRAMING_TRUNCATE)
                and self.delta == 0 and ENCODINGS[self.encoding] in KNOWN_ENCODINGS
                and self.headers & 0b111 in (0, 1) and not self.headers & ~0b111
                and self.timeout < HONEST_TIMEOUTS and self.metadata in HONEST_METADATA)


def compress(data: bytes, encoding: str | None) -> bytes:
    """grpc-encoding's compression: gzip's format for gzip, zlib's for deflate (level 1: a
    padded message is megabytes of zeros)."""
    if encoding == "deflate":
        return zlib.compress(data, 1)
    return gzip.compress(data, compresslevel=1, mtime=0)


def _padded(payload: bytes, size: str, limit: int) -> bytes:
    """The message grown to `size` (SIZES) with an unknown field (number 15, bytes), which
    the request parser keeps and skips."""
    target = {"L-1": limit - 1, "L": limit, "L+1": limit + 1, "4MiB": 4 * 2**20,
              "L+4096": limit + 4096, "64KiB": 65535, "16KiB+1": 16385}.get(size)
    if target is None or target <= len(payload) + 16:
        return payload
    n = target - len(payload) - 1  # field tag byte
    for _ in range(3):  # the length's varint shortens what it leaves
        var = _varint(n)
        n = target - len(payload) - 1 - len(var)
    return payload + b"\x7a" + _varint(n) + b"\x00" * n


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(wire: Wire, limit: int) -> bytes:
    """The DATA bytes of the stream: each message as its 5-byte prefix (compressed flag,
    big-endian length, as the framing bits say) and its payload."""
    encoding = ENCODINGS[wire.encoding]
    message = _padded(wire.payload, SIZES[wire.size], limit)
    mode = wire.framing & 0b11
    compressed = encoding in ("gzip", "deflate")
    if mode == FLAG_SET_RAW:
        body, flag = message, 1
    elif mode == FLAG_CLEAR_COMPRESSED:
        body, flag = compress(message, encoding), 0
    else:
        body = compress(message, encoding) if compressed else message
        flag = wire.flag_byte if mode == FLAG_BYTE else int(compressed)
    if wire.framing & FRAMING_CORRUPT and body:
        i = abs(wire.delta) % len(body) if wire.delta else len(body) // 2
        body = body[:i] + bytes([body[i] ^ 0x5A]) + body[i + 1:]
    length = (len(body) + wire.delta) % 2**32
    one = bytes([flag]) + struct.pack(">I", length) + body
    out = one + one if wire.framing & FRAMING_TWO else one
    if wire.framing & FRAMING_TRUNCATE:
        out = out[:len(out) // 2]
    return out


def request_headers(wire: Wire, port: int) -> list:
    path = PATHS[wire.path][0].encode("latin-1")
    headers = [(b":method", b"GET" if wire.headers & HEADER_GET else b"POST"),
               (b":scheme", b"https" if wire.headers & HEADER_HTTPS else b"http"),
               (b":path", path)]
    if not wire.headers & HEADER_NO_AUTHORITY:
        headers.append((b":authority", f"127.0.0.1:{port}".encode()))
    content_type = CONTENT_TYPES[wire.headers & 0b111]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    if not wire.headers & HEADER_NO_TE:
        headers.append((b"te", b"trailers"))
    encoding = ENCODINGS[wire.encoding]
    if encoding is not None:
        headers.append((b"grpc-encoding", encoding.encode()))
    headers.append((b"grpc-accept-encoding", b"identity,deflate,gzip"))
    timeout = TIMEOUTS[wire.timeout]
    if timeout is not None:
        headers.append((b"grpc-timeout", timeout.encode()))
    if wire.headers & HEADER_BAD_NAME:
        headers += [(b"X-Upper", b"1"), (b"connection", b"keep-alive")]
    headers += [(k.encode(), v.encode("latin-1", "replace")) for k, v in METADATA[wire.metadata]]
    return headers


@dataclasses.dataclass
class Answer:
    """What came back on the stream: the status (a code's name, "RST_STREAM n",
    "GOAWAY n", "closed" or "no answer"), its message, the response body's bytes."""

    status: str = "no answer"
    message: str = ""
    body: bytes = b""
    headers: dict = dataclasses.field(default_factory=dict)


class WireClient:
    """Sends Wire inputs to the gRPC server at 127.0.0.1:`port` whose receive limit is
    `limit` bytes; `answer_timeout_s`: how long a stream may wait for its answer."""

    def __init__(self, port: int, limit: int, answer_timeout_s: float = 10.0):
        import h2.config

        self.port = port
        self.limit = limit
        self.answer_timeout_s = answer_timeout_s
        # the client sends what its input says, malformed headers too
        self.config = h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=False,
            normalize_inbound_headers=False)

    def send(self, wire: Wire, wait_s: float | None = None) -> Answer:
        """Sends the stream `wire` describes on a new connection and reads until it is
        answered, reset, or the connection ends, or `wait_s` (default answer_timeout_s)
        passed since it was sent: "no answer"."""
        import h2.connection
        import h2.exceptions
        import h2.settings

        answer = Answer()
        deadline = time.monotonic() + self.answer_timeout_s
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.answer_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = h2.connection.H2Connection(self.config)
        state = {"done": False}
        sid = 1
        try:
            conn.initiate_connection()
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
            conn.increment_flow_control_window(2**31 - 1 - 65535)
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, request_headers(wire, self.port), end_stream=False)
            out = bytearray(conn.data_to_send())  # sent in as few writes as flow control allows
            data = frame(wire, self.limit)
            rng = random.Random(wire.delta ^ len(data))
            pos = 0
            while pos < len(data) and not state["done"]:
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0 or len(out) >= 1 << 16:
                    sock.sendall(out)
                    out.clear()
                    if window <= 0 or select.select([sock], [], [], 0)[0]:
                        # a window update, or an answer before the whole message (a length
                        # over the limit): the rest is not sent then
                        self._read(sock, conn, sid, answer, state, deadline)
                    continue
                n = min(window, len(data) - pos)
                if wire.framing & FRAMING_SPLIT:
                    n = min(n, rng.choice((1, 5, 6, 100, 4096)))
                conn.send_data(sid, data[pos:pos + n])
                pos += n
                out += conn.data_to_send()
            if not state["done"]:
                if wire.framing & FRAMING_RESET:
                    conn.reset_stream(sid, 8)  # CANCEL
                    state["done"] = True
                    answer.status = "reset by the client"
                elif wire.framing & FRAMING_TRAILERS:
                    conn.send_headers(sid, [(b"x-trailer", b"1")], end_stream=True)
                else:
                    conn.end_stream(sid)
                out += conn.data_to_send()
            sock.sendall(out)
            if wait_s is not None:
                deadline = time.monotonic() + wait_s
            while not state["done"]:
                self._read(sock, conn, sid, answer, state, deadline)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError,
                BrokenPipeError, ConnectionResetError) as e:
            try:  # what the server said before it closed
                while not state["done"]:
                    self._read(sock, conn, sid, answer, state, deadline)
            except (OSError, h2.exceptions.ProtocolError):
                pass
            if answer.status == "no answer":
                answer.status = f"closed ({type(e).__name__})"
        except TimeoutError:
            pass
        finally:
            try:
                conn.close_connection()
                sock.sendall(conn.data_to_send())
            except Exception:  # noqa: BLE001  (the connection is gone already)
                pass
            sock.close()
        return answer

    def _read(self, sock, conn, sid: int, answer: Answer, state: dict, deadline: float) -> None:
        import h2.events

        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            raise
        except OSError:
            data = b""
        if not data:
            state["done"] = True
            if answer.status == "no answer":
                answer.status = "closed"
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                answer.headers.update({k.decode("latin-1"): v.decode("latin-1")
                                       for k, v in ev.headers})
                code = answer.headers.get("grpc-status")
                if code is not None:
                    answer.status = (_CODE_NAMES[int(code)] if code.isdigit()
                                     and int(code) < len(_CODE_NAMES) else f"grpc-status {code}")
                    answer.message = urllib.parse.unquote(answer.headers.get("grpc-message", ""))
            elif isinstance(ev, h2.events.DataReceived):
                answer.body += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                state["done"] = True
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                state["done"] = True
                if answer.status == "no answer":
                    answer.status = f"RST_STREAM {int(ev.error_code)}"
            elif isinstance(ev, h2.events.ConnectionTerminated):
                state["done"] = True
                if answer.status == "no answer":
                    answer.status = f"GOAWAY {int(ev.error_code)}"
        out = conn.data_to_send()
        if out:
            sock.sendall(out)


def check(wire: Wire, answer: Answer, check_message) -> str:
    """The outcome ("Predict INVALID_ARGUMENT", "Predict RST_STREAM 1"); Finding for what the
    server must not answer (module docstring)."""
    from pgn_tf.serving.status import MAX_MESSAGE_CHARS

    name = PATHS[wire.path][0].rsplit("/", 1)[-1] if wire.path < 9 else f"path{wire.path}"
    where = f"{name} {'honest' if wire.honest() else 'dishonest'}"
    if answer.status == "no answer":  # (a dishonest stream's is "late": WireHarness)
        raise Finding(f"{where}: no answer within the answer timeout ({wire!r:.300})")
    if wire.honest() and answer.status not in HONEST_CODES:
        raise Finding(f"{where}: answered {answer.status}: {answer.message[:300]} "
                      f"({wire!r:.300})")
    if answer.message:
        check_message(f"{where} {answer.status}", answer.message, MAX_MESSAGE_CHARS)
    if answer.status == "OK":
        _check_response(where, answer.body, GRPC_METHODS[wire.request_index].request)
    answer_feature(answer_key("grpc", wire.path, answer.status, answer.message[:40]))
    return f"{name} {answer.status}"


def _check_response(where: str, body: bytes, request_cls) -> None:
    """An OK answer's body is one uncompressed or gzip message of the method's response."""
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        predict_pb2,
    )

    responses = {predict_pb2.PredictRequest: predict_pb2.PredictResponse,
                 get_model_metadata_pb2.GetModelMetadataRequest:
                     get_model_metadata_pb2.GetModelMetadataResponse,
                 get_model_status_pb2.GetModelStatusRequest:
                     get_model_status_pb2.GetModelStatusResponse}
    if len(body) < 5:
        raise Finding(f"{where}: OK with a body of {len(body)} bytes")
    flag, length = body[0], struct.unpack(">I", body[1:5])[0]
    if length != len(body) - 5 or flag not in (0, 1):
        raise Finding(f"{where}: OK with a message prefix ({flag}, {length}) for "
                      f"{len(body) - 5} bytes")
    message = body[5:]
    if flag:
        message = gzip.decompress(message) if message[:2] == b"\x1f\x8b" else zlib.decompress(
            message)
    cls = responses.get(request_cls)
    if cls is not None:
        try:
            cls.FromString(message)
        except Exception as e:  # noqa: BLE001  (protobuf's DecodeError)
            raise Finding(f"{where}: OK with a body that is not a {cls.__name__}: {e}") from None


# -- the mutator -----------------------------------------------------------------------------


def wire_seeds(grpc_payloads: dict) -> list[bytes]:
    """Honest streams of each served method's valid requests ({method index: [payloads]}),
    each encoding, and one of each framing lie."""
    out = []
    for i, (_, index) in enumerate(PATHS[:SERVED_PATHS + 1]):
        for payload in grpc_payloads.get(index, [])[:3]:
            for enc in (0, 2, 3):
                out.append(Wire(path=i, encoding=enc, payload=payload).serialize())
    predict = grpc_payloads[0][0]
    for framing in (FLAG_SET_RAW, FLAG_CLEAR_COMPRESSED, FRAMING_CORRUPT, FRAMING_SPLIT,
                    FRAMING_TWO, FRAMING_RESET, FRAMING_TRAILERS, FRAMING_TRUNCATE):
        out.append(Wire(encoding=2, framing=framing, payload=predict).serialize())
    for size in range(1, len(SIZES)):
        out.append(Wire(size=size, payload=predict).serialize())
    out.append(Wire(delta=1, payload=predict).serialize())
    out.append(Wire(delta=-1, payload=predict).serialize())
    out.append(Wire(path=16, payload=predict).serialize())
    return out


class WireMutator:
    """atheris' custom mutator for `grpc_wire` inputs: 6 in 100 of its mutations are
    libFuzzer's byte mutations of the whole input and 6 of the message alone, 30 set one
    header choice (six times in ten back to the honest one, so most streams stay honest and
    reach the handlers), the rest change the request message through its structure
    (serving.fuzz_protos.mutate_message), of the path's request type. A padded size is reset
    seven times in ten: a message of megabytes costs many times an ordinary input."""

    def __init__(self, mutate_bytes: MutateBytes):
        self.mutate_bytes = mutate_bytes

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        r = rng.random()
        if r < 0.06:
            return self.mutate_bytes(data, max_size)
        wire = Wire.parse(data)
        if wire.size and rng.random() < 0.7:
            wire.size = 0  # messages of megabytes are slow to send and parse: kept rare
        if r < 0.12:  # libFuzzer's byte mutation of the message alone
            wire.payload = self.mutate_bytes(wire.payload, max_size - HEADER_BYTES)
            return wire.serialize()[:max_size]
        if r < 0.42:
            self._choice(wire, rng)
        else:
            cls = GRPC_METHODS[wire.request_index].request
            msg = cls()
            try:
                msg.ParseFromString(wire.payload)
            except Exception:  # noqa: BLE001  (not this message: start from an empty one)
                msg = cls()
            for _ in range(1 + int(rng.expovariate(1.0))):
                try:
                    mutate_message(msg, rng, self.mutate_bytes, max_size - HEADER_BYTES)
                except (ValueError, TypeError, OverflowError, RecursionError):
                    break
            if msg.ByteSize() <= max_size - HEADER_BYTES:
                wire.payload = msg.SerializeToString()
        return wire.serialize()[:max_size]

    def _choice(self, wire: Wire, rng: random.Random) -> None:
        field = rng.choice(("path", "encoding", "framing", "flag_byte", "delta", "size",
                            "headers", "timeout", "metadata"))
        honest = rng.random() < 0.6
        if field == "path":
            wire.path = rng.randrange(SERVED_PATHS) if honest else rng.randrange(len(PATHS))
        elif field == "encoding":
            wire.encoding = rng.choice((0, 1, 2, 3)) if honest else rng.randrange(len(ENCODINGS))
        elif field == "framing":
            wire.framing = 0 if honest else wire.framing ^ (1 << rng.randrange(8))
        elif field == "flag_byte":
            wire.flag_byte = rng.choice((0, 1, 2, 0x80, 0xFF))
        elif field == "delta":
            wire.delta = 0 if honest else rng.choice((1, -1, 5, -5, 2**31 - 1, -2**31, 4096,
                                                      -len(wire.payload) - 5))
        elif field == "size":
            wire.size = 0 if honest or rng.random() < 0.5 else rng.randrange(len(SIZES))
        elif field == "headers":
            wire.headers = 0 if honest else wire.headers ^ (1 << rng.randrange(8))
        elif field == "timeout":
            wire.timeout = rng.randrange(HONEST_TIMEOUTS if honest else len(TIMEOUTS))
        else:
            wire.metadata = (rng.choice(HONEST_METADATA) if honest
                             else rng.randrange(len(METADATA)))


# -- the campaign's harness ------------------------------------------------------------------


class WireHarness:
    """The `grpc_wire` campaign's target: a LoopbackServer over the stand-in export and a
    WireClient to its gRPC port; `one(data)` sends one stream.

    An honest stream waits up to `answer_timeout_s` for its answer. A dishonest one waits
    `dishonest_wait_s`: gRPC answers a stream its transport refuses (a length over the limit,
    a malformed header or timeout) far later than anything else is answered, so waited for
    in full such inputs would take most of a campaign's time. One not answered by then is closed and counted "late"; what it must not do, reach a
    handler wrongly or stop the server, still shows: in the server's error log, and in the
    answer to the next honest stream."""

    def __init__(self, loopback, answer_timeout_s: float = 10.0, dishonest_wait_s: float = 0.01,
                 settle_s: float = 0.003):
        self.loopback = loopback
        self.settle_s = settle_s
        limit = loopback.server.predictor.limits.max_message_bytes
        self.client = WireClient(loopback.grpc_port, limit, answer_timeout_s)
        self.dishonest_wait_s = dishonest_wait_s
        self.counts: collections.Counter = collections.Counter()

    def one(self, data: bytes) -> str:
        self.loopback.start_input()
        wire = Wire.parse(data)
        honest = wire.honest()
        answer = self.client.send(wire, None if honest else self.dishonest_wait_s)
        if not honest and answer.status == "no answer":
            answer.status = "late"
        if answer.status != "OK" and "transport" not in self.loopback.stages.current():
            # a stream no handler saw: what the server does once gRPC refused it (an abort that
            # fails, logged from its event loop) is logged a moment after the client reads the
            # status; waited for here, so that a finding is this input's and libFuzzer keeps
            # this input as its reproducer
            time.sleep(self.settle_s)
        outcome = check(wire, answer, self.loopback.check_message)
        self.loopback.end_input(f"grpc_wire {outcome}")
        self.counts[f"grpc_wire {outcome}"] += 1
        return outcome
