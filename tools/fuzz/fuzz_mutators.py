"""Structure-aware mutation of the requests serving.fuzz feeds the server: protos changed through
their descriptors, JSON bodies through their parsed tree, and a share left to libFuzzer's own
byte mutations.

atheris-libprotobuf-mutator would mutate the protos, but its source distribution builds with
bazel (docs/design.md, "fuzz extra"), so the mutation is written here and in
serving.fuzz_protos. `mutate_message` (serving.fuzz_protos) picks a
field somewhere inside a request (FIELD_WEIGHTS steers it to the tensors) and goes into it or
changes it: a dimension's size, a dtype, a value list's length, tensor_content's bytes, a map's
key, a version. The values it sets are drawn where serving.validation draws its lines
(FIELD_VALUES: the batch cap and one past it, the element and byte caps, int64's ends, rank 17,
half_val's 16 bits) three times in four, else from the field type's edges or by libFuzzer's byte
mutation of the current value. `mutate_json` does the same to a REST body. A fuzz input is a
method byte and a payload (`split_input`); `Mutator` is the custom mutator atheris calls.

Pure Python: no TensorFlow, no atheris (a byte mutator is passed in: atheris.Mutate in a
campaign, anything of its signature in a test).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import math
import random
import zlib

from tools.fuzz.fuzz_protos import (
    INPUT_NAMES,
    REPEAT_COUNTS,
    SIGNATURES,
    MutateBytes,
    mutate_message,
    mutate_str,
)


@dataclasses.dataclass(frozen=True)
class Method:
    """One way into the server. kind "grpc": `path` is the gRPC method and `request` its request
    message class; kind "rest": `path` is the URL path of a POST, the payload its body, sent
    with Content-Encoding `encoding` ("gzip": the payload is the compressed body)."""

    kind: str
    name: str
    path: str
    request: type | None = None
    encoding: str = ""


def split_input(methods: tuple, data: bytes) -> tuple[int, bytes]:
    """A fuzz input -> (index of its method in `methods`, payload)."""
    if not data:
        return 0, b""
    return data[0] % len(methods), data[1:]


# -- JSON bodies -----------------------------------------------------------------------------

JSON_KEYS = ("instances", "inputs", "signature_name", "b64", *INPUT_NAMES[:4], "")
_JSON_EDGES = (None, True, False, 0, 1, -1, 2, 4, 16, 17, 120, 401, 2**31 - 1, 2**31,
               -2**31 - 1, 2**63, 2**64, 10**30, 1.5, -0.0, 1e308, 1e-320, math.inf, math.nan,
               "", [], {}, [[]])
_BAD_BASE64 = ("", "=", "a", "YQ", "YQ=", "YQ==", "!!!!", "YQ==YQ==", "Y Q==", 5, None, [])


def _json_leaf(rng: random.Random, texts: tuple):
    r = rng.random()
    if r < 0.3:
        return rng.choice(_JSON_EDGES)
    if r < 0.55 and texts:
        return rng.choice(texts)
    if r < 0.7:
        return rng.choice(SIGNATURES + INPUT_NAMES)
    if r < 0.85:
        return {"b64": base64.b64encode(rng.randbytes(rng.choice((0, 1, 3, 16, 100)))).decode()}
    return {"b64": rng.choice(_BAD_BASE64)}


def _json_places(value, limit: int = 256) -> list:
    """(container, key) of up to `limit` places in a JSON tree; (None, None) is the root."""
    out, stack = [(None, None)], [value]
    while stack and len(out) < limit:
        node = stack.pop()
        items = (node.items() if isinstance(node, dict)
                 else enumerate(node) if isinstance(node, list) else ())
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return out


def mutate_json(value, rng: random.Random, mutate_bytes: MutateBytes, texts: tuple = (),
                max_size: int = 4096):
    """One structural change in a parsed JSON body (changed in place where it can be): a value
    replaced (by an edge value, a text of `texts`, a name, a {"b64": ...} object), wrapped in a
    list or an object; a list's element removed or repeated (up to past --max_batch_rows, as
    far as max_size bytes of copies allow); an object's key added, removed or renamed; a
    string's bytes mutated. Returns the new tree."""
    parent, key = rng.choice(_json_places(value))
    old = value if parent is None else parent[key]
    r = rng.random()
    if isinstance(old, list) and old and r < 0.3:
        i = rng.randrange(len(old))
        if rng.random() < 0.3:
            del old[i]
        else:
            copy = json.dumps(old[i])
            k = min(rng.choice(REPEAT_COUNTS), max_size // (len(copy) + 1))
            old.extend(json.loads(copy) for _ in range(k))
        return value
    if isinstance(old, dict) and r < 0.3:
        if old and rng.random() < 0.4:
            moved = old.pop(rng.choice(list(old)))
            if rng.random() < 0.5:
                old[rng.choice(JSON_KEYS)] = moved
        else:
            old[rng.choice(JSON_KEYS)] = _json_leaf(rng, texts)
        return value
    if isinstance(old, str) and r < 0.5:
        new = mutate_str(old, mutate_bytes)
    elif r < 0.6:
        new = [old] * rng.choice((1, 1, 2, 3))
    elif r < 0.65:
        new = {rng.choice(JSON_KEYS): old}
    else:
        new = _json_leaf(rng, texts)
    if parent is None:
        return new
    parent[key] = new
    return value


def dump_json(value, rng: random.Random) -> bytes:
    """A body's bytes: ASCII-escaped or raw UTF-8, compact or spaced; a lone surrogate becomes
    bytes that are not UTF-8."""
    text = json.dumps(value, ensure_ascii=rng.random() < 0.8,
                      separators=(",", ":") if rng.random() < 0.5 else None)
    return text.encode("utf-8", "surrogatepass")


# -- the custom mutator ----------------------------------------------------------------------


class Mutator:
    """atheris' custom mutator (data, max_size, seed) -> data for inputs of method byte +
    payload (split_input). Of its mutations, 3 in 100 move the payload to another method, 12
    are libFuzzer's byte mutations of the whole payload (wire bytes, JSON text), the rest are
    structural: one or more of mutate_message (gRPC; a payload that does not parse starts
    afresh) or mutate_json (REST, a gzip body inflated and compressed again; a body that does
    not parse gets a byte mutation). A structural mutation whose payload would be over max_size
    is dropped, so no mutation builds more than a few copies of an input.

    Args:
      methods: a target's table of Method; mutate_bytes: atheris.Mutate in a campaign;
      texts: strings a JSON value may become (articles).
    """

    def __init__(self, methods: tuple, mutate_bytes: MutateBytes, texts: tuple = ()):
        self.methods = methods
        self.mutate_bytes = mutate_bytes
        self.texts = texts

    def __call__(self, data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        index, payload = split_input(self.methods, data)
        r = rng.random()
        if r < 0.03:
            index = rng.randrange(len(self.methods))
        elif r < 0.15:
            payload = self.mutate_bytes(payload, max(1, max_size - 1))
        else:
            for _ in range(1 + int(rng.expovariate(1.0))):
                payload = self._structural(self.methods[index], payload, rng, max_size - 1)
        return (bytes([index]) + payload)[:max_size]

    def _structural(self, method: Method, payload: bytes, rng: random.Random,
                    max_size: int) -> bytes:
        """One structural mutation of `payload`; dropped (the payload comes back unchanged)
        when a field cannot hold the value or the result is over max_size bytes."""
        if method.kind == "grpc":
            msg = method.request()
            try:
                msg.ParseFromString(payload)
            except Exception:  # noqa: BLE001  (not this message: start from an empty one)
                msg = method.request()
            try:
                mutate_message(msg, rng, self.mutate_bytes, max_size)
            except (ValueError, TypeError, OverflowError, RecursionError):
                return payload
            return msg.SerializeToString() if msg.ByteSize() <= max_size else payload
        text = _gunzip(payload, 4 * max_size) if method.encoding == "gzip" else payload
        try:
            body = json.loads(text)
        except (TypeError, ValueError, RecursionError):  # TypeError: not gzip
            return self.mutate_bytes(payload, max(16, min(max_size, 2 * len(payload))))
        try:
            out = dump_json(mutate_json(body, rng, self.mutate_bytes, self.texts, max_size), rng)
        except (ValueError, TypeError, RecursionError):
            return payload
        if method.encoding == "gzip":
            out = gzip.compress(out, compresslevel=rng.choice((1, 6, 9)), mtime=0)
        return out if len(out) <= max_size else payload


def _gunzip(data: bytes, limit: int) -> bytes | None:
    """A gzip member's content, None when it is not one or inflates past `limit` bytes."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit)
    except zlib.error:
        return None
    return out if inflater.eof and not inflater.unconsumed_tail else None
