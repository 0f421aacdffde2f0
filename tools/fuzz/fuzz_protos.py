"""Structure-aware mutation of the gRPC requests serving.fuzz feeds the server: `mutate_message`
picks a field somewhere inside a request proto, through its descriptors (FIELD_WEIGHTS steers it
to the tensors), and goes into it or changes it: a dimension's size, a dtype, a value list's
length, tensor_content's bytes, a map's key, a version. The values it sets are drawn where
serving.validation draws its lines (FIELD_VALUES) three times in four, else from the field
type's edges or by libFuzzer's byte mutation of the current value (serving.fuzz_mutators says
why this is written here and combines it with the JSON mutation). Pure Python.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable

from google.protobuf import descriptor

from pgn_tf.saved_model.contract import (
    ARTICLES,
    BEAM_SIZE,
    MAX_DECODE_STEPS,
    MIN_DECODE_STEPS,
    SERVING_DEFAULT,
    SUMMARIZE_OPTIONS,
    SUMMARIZE_VERBOSE,
)

MutateBytes = Callable[[bytes, int], bytes]  # atheris.Mutate's signature: (data, max_size)


# -- values chosen where validation draws its lines ------------------------------------------

_INT32_EDGES = (0, 1, -1, 2, 4, 16, 17, 120, 255, 256, 257, 400, 401, 65535, 2**31 - 1, -2**31)
_INT64_EDGES = _INT32_EDGES + (2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -2**63)
_UINT32_EDGES = (0, 1, 2, 255, 256, 65535, 2**31, 2**32 - 1)
_UINT64_EDGES = _UINT32_EDGES + (2**32, 2**63, 2**64 - 1)
_FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, 65504.0, 65520.0, 3.4e38, -3.4e38, 1e-45, 1e-300,
                1e308, math.inf, -math.inf, math.nan)
# Dimension sizes: empty, the batch cap (--max_batch_rows 256) and one past it, the element caps
# of 10 MiB (string pointers of 8 bytes, int32s of 4) and one past, int64's ends, negatives.
_DIM_SIZES = (0, 1, 2, 3, 255, 256, 257, 2**20, 1310720, 1310721, 2621440, 2621441, 2**31,
              2**32, 2**62, 2**63 - 1, -1, -2, -2**63)
SIGNATURES = (SERVING_DEFAULT, SUMMARIZE_VERBOSE, SUMMARIZE_OPTIONS, "", "__saved_model_init_op",
              "serving_default ", "SERVING_DEFAULT")
INPUT_NAMES = (ARTICLES, BEAM_SIZE, MAX_DECODE_STEPS, MIN_DECODE_STEPS, "", "articles:0",
               "x" * 300)
OUTPUT_NAMES = ("summaries", "scores", "tokens", "attention", "p_gen", "raw_summaries",
                "raw_tokens", "", "nope")
MODEL_NAMES = ("pgn", "", "other", "PGN", "pgn\x00", "x" * 1000)
VERSION_LABELS = ("stable", "", "canary", "stable ", "x" * 1000)

# Descriptor full name -> values tried three times in four (else the type's edges, or an enum's
# declared values, or a byte mutation).
FIELD_VALUES = {
    "tensorflow.TensorShapeProto.Dim.size": _DIM_SIZES,
    "tensorflow.TensorShapeProto.Dim.name": ("", "batch", "x" * 100),
    "tensorflow.TensorShapeProto.unknown_rank": (True, False),
    "tensorflow.TensorProto.dtype": (-1, 0, 34, 100, 134, 2**31 - 1),  # undeclared DataTypes
    "tensorflow.TensorProto.version_number": (0, 1, -1, 2**31 - 1),
    # a float16 / bfloat16 is 16 bits of an int32: 1.0, inf, NaN, all ones, and past 16 bits
    "tensorflow.TensorProto.half_val": (0, 1, 0x3C00, 0x7C00, 0x7E00, 0xFFFF, 0x10000, -1,
                                        2**31 - 1),
    "tensorflow.serving.ModelSpec.name": MODEL_NAMES,
    "tensorflow.serving.ModelSpec.signature_name": SIGNATURES,
    "tensorflow.serving.ModelSpec.version_label": VERSION_LABELS,
    "google.protobuf.Int64Value.value": (1, 0, 2, -1, 2**63 - 1, -2**63),
    "tensorflow.serving.PredictRequest.output_filter": OUTPUT_NAMES,
    "tensorflow.serving.GetModelMetadataRequest.metadata_field": ("signature_def", "", "x"),
}
MAP_KEYS = {"tensorflow.serving.PredictRequest.inputs": INPUT_NAMES}
# How often a field is picked, relative to 1: where the tensors are.
FIELD_WEIGHTS = {
    "tensorflow.serving.PredictRequest.inputs": 8,
    "tensorflow.serving.PredictRequest.model_spec": 2,
    "tensorflow.TensorProto.dtype": 3,
    "tensorflow.TensorProto.tensor_shape": 6,
    "tensorflow.TensorProto.tensor_content": 3,
    "tensorflow.TensorProto.string_val": 4,
    "tensorflow.TensorProto.int_val": 3,
    "tensorflow.TensorProto.half_val": 2,
    "tensorflow.TensorProto.float_val": 2,
    "tensorflow.TensorShapeProto.dim": 4,
}
REPEAT_COUNTS = (1, 1, 1, 2, 3, 8, 17, 64, 257)  # elements appended at once: past rank 16, 256 rows
MAX_DEPTH = 8  # message nesting a mutation goes into (TensorProto.variant_val nests TensorProtos)
_FD = descriptor.FieldDescriptor
_INT_EDGES = {_FD.TYPE_INT32: _INT32_EDGES, _FD.TYPE_SINT32: _INT32_EDGES,
              _FD.TYPE_SFIXED32: _INT32_EDGES, _FD.TYPE_INT64: _INT64_EDGES,
              _FD.TYPE_SINT64: _INT64_EDGES, _FD.TYPE_SFIXED64: _INT64_EDGES,
              _FD.TYPE_UINT32: _UINT32_EDGES, _FD.TYPE_FIXED32: _UINT32_EDGES,
              _FD.TYPE_UINT64: _UINT64_EDGES, _FD.TYPE_FIXED64: _UINT64_EDGES}
# tensor_content lengths: n x itemsize for small n, and one off
_BYTE_LENGTHS = (0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 33, 64, 255, 256, 1024)


# -- protos ----------------------------------------------------------------------------------


def _is_map(field) -> bool:
    return field.type == _FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _is_repeated(field) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf >= 6 (`label` is deprecated there)
        return field.is_repeated
    return field.label == _FD.LABEL_REPEATED


def mutate_str(value: str, mutate_bytes: MutateBytes) -> str:
    return mutate_bytes(value.encode("utf-8"), max(16, 2 * len(value))).decode("utf-8", "replace")


def _scalar(field, current, rng: random.Random, mutate_bytes: MutateBytes):
    """A new value for a scalar field, or for one element of a repeated one."""
    chosen = FIELD_VALUES.get(field.full_name)
    t = field.type
    if t == _FD.TYPE_ENUM and rng.random() < 0.6:
        return rng.choice(field.enum_type.values).number
    if chosen and rng.random() < 0.75:
        return rng.choice(chosen)
    if t in _INT_EDGES:
        edges = _INT_EDGES[t]
        if rng.random() < 0.7:
            return rng.choice(edges)
        lo, hi = min(edges), max(edges)
        if rng.random() < 0.2:
            return rng.randint(lo, hi)
        return max(lo, min(hi, (current or 0) + rng.randint(-3, 3)))
    if t in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return rng.choice(_FLOAT_EDGES) if rng.random() < 0.7 else rng.uniform(-1e6, 1e6)
    if t == _FD.TYPE_BOOL:
        return not current
    if t == _FD.TYPE_ENUM:
        return rng.choice(_INT32_EDGES)  # proto3 enums are open: any int32 parses
    if t == _FD.TYPE_STRING:
        return mutate_str(current or "", mutate_bytes)
    if t == _FD.TYPE_BYTES:
        current = current or b""
        r = rng.random()
        if r < 0.4:
            return rng.randbytes(rng.choice(_BYTE_LENGTHS))
        if r < 0.55:
            return current * rng.choice((2, 3, 4))
        return mutate_bytes(current, max(16, 2 * len(current)))
    raise TypeError(f"field {field.full_name} of type {t}")


@dataclasses.dataclass
class _Mutation:
    """What one mutate_message call carries down the message: its randomness, the byte
    mutator, and max_size, which caps the copies one step appends (copies of copies at each
    nesting level would otherwise grow as 257^depth)."""

    rng: random.Random
    mutate_bytes: MutateBytes
    max_size: int

    def copies(self, wanted: int, size: int) -> int:
        """How many copies of an element of `size` bytes to append: `wanted`, as far as
        max_size bytes of them allow."""
        return min(wanted, self.max_size // (size + 2))


def _scalar_size(value) -> int:
    return len(value) if isinstance(value, (bytes, str)) else 10


def _mutate_map(msg, field, m: _Mutation, depth: int) -> None:
    rng = m.rng
    container = getattr(msg, field.name)
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    is_message = value_field.type == _FD.TYPE_MESSAGE
    keys = list(container.keys())
    named = MAP_KEYS.get(field.full_name, ())

    def new_key():
        if named and rng.random() < 0.8:
            return rng.choice(named)
        return _scalar(key_field, rng.choice(keys) if keys else None, rng, m.mutate_bytes)

    r = rng.random()
    if not keys or r < 0.15:  # a new entry
        key = new_key()
        if is_message:
            _mutate(container[key], m, depth + 1)
        else:
            container[key] = _scalar(value_field, None, rng, m.mutate_bytes)
    elif r < 0.25:
        del container[rng.choice(keys)]
    elif r < 0.35 and is_message:  # a value under another key too
        old = rng.choice(keys)
        container[new_key()].CopyFrom(container[old])
    elif is_message:
        _mutate(container[rng.choice(keys)], m, depth + 1)
    else:
        key = rng.choice(keys)
        container[key] = _scalar(value_field, container[key], rng, m.mutate_bytes)


def _mutate_repeated(msg, field, m: _Mutation, depth: int) -> None:
    rng = m.rng
    values = getattr(msg, field.name)
    n = len(values)
    r = rng.random()
    is_message = field.type == _FD.TYPE_MESSAGE
    if n == 0 or r < 0.35:  # append one new element, or copies of one
        k = rng.choice(REPEAT_COUNTS)
        if is_message:
            if n and rng.random() < 0.5:
                new = values[rng.randrange(n)]
            else:
                new = values.add()
                _mutate(new, m, depth + 1)
                k -= 1
            for _ in range(m.copies(k, new.ByteSize())):
                values.add().CopyFrom(new)
        else:
            new = _scalar(field, values[-1] if n else None, rng, m.mutate_bytes)
            k = m.copies(k, _scalar_size(new))
            values.extend([new] * k if rng.random() < 0.5 else
                          [_scalar(field, new, rng, m.mutate_bytes) for _ in range(min(k, 17))])
    elif r < 0.45:
        del values[rng.randrange(n)]
    elif r < 0.5:
        del values[rng.randrange(n):]
    elif r < 0.55:
        msg.ClearField(field.name)
    elif is_message:
        _mutate(values[rng.randrange(n)], m, depth + 1)
    else:
        i = rng.randrange(n)
        values[i] = _scalar(field, values[i], rng, m.mutate_bytes)


def _mutate(msg, m: _Mutation, depth: int) -> None:
    fields = msg.DESCRIPTOR.fields
    if not fields:
        return
    rng = m.rng
    field = rng.choices(fields, [FIELD_WEIGHTS.get(f.full_name, 1) for f in fields])[0]
    if _is_map(field):
        _mutate_map(msg, field, m, depth)
    elif _is_repeated(field):
        _mutate_repeated(msg, field, m, depth)
    elif field.type == _FD.TYPE_MESSAGE:
        if depth < MAX_DEPTH and rng.random() < 0.9:
            _mutate(getattr(msg, field.name), m, depth + 1)
        else:
            msg.ClearField(field.name)
    elif field.containing_oneof is not None and rng.random() < 0.1:
        msg.ClearField(field.containing_oneof.name)
    else:
        setattr(msg, field.name, _scalar(field, getattr(msg, field.name), rng, m.mutate_bytes))


def mutate_message(msg, rng: random.Random, mutate_bytes: MutateBytes,
                   max_size: int = 4096) -> None:
    """Changes one field somewhere inside `msg`, in place: picks a field of this message
    (FIELD_WEIGHTS) and goes into it (a sub-message, an element of a repeated field, a map's
    value; at most MAX_DEPTH levels down) or changes it (a new value; elements appended,
    removed or copied, copies of up to max_size bytes; a map entry added, removed or copied
    under another key; a oneof cleared). A setter raises ValueError or TypeError for a value
    its field cannot hold; the caller drops that mutation."""
    _mutate(msg, _Mutation(rng, mutate_bytes, max_size), 0)
