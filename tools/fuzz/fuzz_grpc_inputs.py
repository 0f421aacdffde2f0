"""The `grpc_wire` campaign's inputs (serving.fuzz_grpc_wire): what an input says about its
HTTP/2 stream, how that becomes the stream's headers and DATA bytes, the seed streams, and the
structure-aware mutator.

An input is a 12-byte header of choices and a serialized request message (`Wire.parse`):

    0 path (PATHS)           1 grpc-encoding (ENCODINGS)      2 framing bits (FRAMING_*)
    3 the compressed flag's byte, for FLAG_BYTE    4-7 a signed delta to the length prefix
    8 size (SIZES: the message padded to around the receive limit; gzipped, a bomb)
    9 header bits (HEADER_*)  10 grpc-timeout (TIMEOUTS)       11 metadata (METADATA)

`Wire.honest` tells a stream any client library could send from one that lies.

Importing this module needs no atheris and starts nothing.
"""

from __future__ import annotations

import dataclasses
import gzip
import random
import struct
import zlib

from tools.fuzz.fuzz_harness import GRPC_METHODS
from tools.fuzz.fuzz_protos import MutateBytes, mutate_message

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
# what the size byte pads the message to: around the server's receive limit L, to gRPC's own
# default limit (4 MiB), and past HTTP/2's default window (64 KiB) and frame size (16 KiB); with
# gzip or deflate, megabytes of zeros are a few kB on the wire: a compression bomb
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
    n = _pad_bytes(len(payload), size, limit)
    return payload if n is None else payload + b"\x7a" + _varint(n) + b"\x00" * n


def _pad_bytes(length: int, size: str, limit: int) -> int | None:
    """The zeros that pad a message of `length` bytes to `size`, or None: not padded."""
    target = {"L-1": limit - 1, "L": limit, "L+1": limit + 1, "4MiB": 4 * 2**20,
              "L+4096": limit + 4096, "64KiB": 65535, "16KiB+1": 16385}.get(size)
    if target is None or target <= length + 16:
        return None
    n = target - length - 1  # field tag byte
    for _ in range(3):  # the length's varint shortens what it leaves
        var = _varint(n)
        n = target - length - 1 - len(var)
    return n


def message_bytes(wire: Wire, limit: int) -> int:
    """The length of the request message `frame` sends (uncompressed, before any lie)."""
    n = _pad_bytes(len(wire.payload), SIZES[wire.size], limit)
    return len(wire.payload) + (0 if n is None else 1 + len(_varint(n)) + n)


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


# -- the seeds and the mutator ---------------------------------------------------------------


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
    seven times in ten: a padded message costs many times an ordinary input."""

    def __init__(self, mutate_bytes: MutateBytes):
        self.mutate_bytes = mutate_bytes

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        r = rng.random()
        if r < 0.06:
            return self.mutate_bytes(data, max_size)
        wire = Wire.parse(data)
        if wire.size and rng.random() < 0.7:
            wire.size = 0  # padded messages are slow to send and parse: kept rare
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
