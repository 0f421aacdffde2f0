"""Request validation: sizes, shapes and types are decided from what the client declared, before
anything of that size is built.

A gRPC `TensorProto` declares its shape; `tf.make_ndarray` pads `string_val` (or any `*_val`)
to that shape, so `dim {size: 1000000000}` with one empty string would allocate 10^9 strings.
Here the dtype, rank, fixed dimensions, batch rows (`--max_batch_rows`), element count and byte
size are all checked from the proto's fields (tensor_shape, len(string_val), the string lengths,
len(tensor_content)) first. A REST JSON value is walked level by level, its shape and byte size
checked, and strings go into `dtype=object` arrays (never `np.array(list_of_str)`, which stores
every string at the longest one's width, 4 bytes a character).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from pgn_tf.serving.status import echo, invalid

MAX_RANK = 16
MESSAGE_FRAMING_BYTES = 64 * 1024  # Limits.max_message_bytes
ROW_FRAMING_BYTES = 64


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask for.

    Args:
      max_request_bytes: bytes of all input tensors together (strings: their lengths).
      max_batch_rows: rows (dimension 0) of a batched input.
    """

    max_request_bytes: int = 10 * 2**20
    max_batch_rows: int = 256

    @property
    def max_message_bytes(self) -> int:
        """The largest serialized request the gRPC server receives (after decompression):
        max_request_bytes of inputs plus their protobuf framing.

        gRPC enforces it while it inflates a compressed message and before the message is
        parsed, so a request that inflates past it costs at most this much memory and is
        answered RESOURCE_EXHAUSTED ("... larger than max"); a request within it is parsed and
        its inputs checked against max_request_bytes here (INVALID_ARGUMENT with the reason).
        The framing: MESSAGE_FRAMING_BYTES for the model spec, input names, shapes and
        output_filter, and ROW_FRAMING_BYTES a batch row for each value's tag and length (a
        string value's framing is 1 + at most 5 bytes; a row holds one value of each batched
        input). A request that encodes numbers as varints (up to 10 bytes an int32) may exceed
        it below max_request_bytes of values: tensor_content holds them exactly."""
        return (self.max_request_bytes + MESSAGE_FRAMING_BYTES
                + ROW_FRAMING_BYTES * self.max_batch_rows)


def dtype_name(enum: int) -> str:
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"dtype {enum}"


def _val_field(dtype: tf.DType) -> tuple[str, int]:
    """The TensorProto repeated field holding values of `dtype`, and values per element."""
    if dtype == tf.string:
        return "string_val", 1
    if dtype in (tf.float16, tf.bfloat16):
        return "half_val", 1
    if dtype == tf.float32:
        return "float_val", 1
    if dtype == tf.float64:
        return "double_val", 1
    if dtype in (tf.int32, tf.int16, tf.int8, tf.uint8, tf.uint16):
        return "int_val", 1
    if dtype == tf.int64:
        return "int64_val", 1
    if dtype == tf.uint32:
        return "uint32_val", 1
    if dtype == tf.uint64:
        return "uint64_val", 1
    if dtype == tf.bool:
        return "bool_val", 1
    if dtype == tf.complex64:
        return "scomplex_val", 2
    if dtype == tf.complex128:
        return "dcomplex_val", 2
    raise invalid(f"inputs of type {dtype.name} are not supported by this server")


def check_shape(key: str, shape: list[int], spec: tf.TensorSpec, limits: Limits,
                batched: bool) -> int:
    """Checks a declared shape against the signature and the limits; returns its element count.

    Args:
      shape: the declared dims (Python ints, any size); spec: the signature's TensorSpec;
      batched: whether dimension 0 is the signature's batch dimension.
    """
    if len(shape) > MAX_RANK:
        raise invalid(f"input '{key}' has rank {len(shape)}, over {MAX_RANK}")
    if any(d < 0 for d in shape):
        raise invalid(f"input '{key}' declares a negative dimension: {shape}")
    want = spec.shape
    if want.rank is not None:
        if len(shape) != want.rank:
            raise invalid(f"input '{key}' must have rank {want.rank} (shape {want}), got shape "
                          f"{shape}")
        for i, (got, fixed) in enumerate(zip(shape, want.as_list())):
            if fixed is not None and got != fixed:
                raise invalid(f"input '{key}' has shape {shape}, signature expects {want} "
                              f"(dimension {i} must be {fixed})")
    if batched and shape and shape[0] > limits.max_batch_rows:
        raise invalid(f"input '{key}' has {shape[0]} rows, over the server's --max_batch_rows="
                      f"{limits.max_batch_rows}; split the request")
    n = math.prod(shape)
    itemsize = 8 if spec.dtype == tf.string else spec.dtype.size  # strings: a pointer each
    if n * itemsize > limits.max_request_bytes:
        raise invalid(f"input '{key}' declares {n} elements ({n * itemsize / 1e6:.1f} MB), over "
                      f"the server's --max_request_bytes={limits.max_request_bytes}")
    return n


def tensor_from_proto(key: str, proto, spec: tf.TensorSpec, limits: Limits,
                      batched: bool) -> tuple[np.ndarray, int]:
    """A gRPC TensorProto -> (numpy array, its byte size), checked before it is built.

    Args:
      proto: tensorflow.TensorProto as the client sent it; spec: the signature's TensorSpec.
    Raises RequestError(INVALID_ARGUMENT) naming the input and what is wrong.
    """
    if proto.dtype != spec.dtype.as_datatype_enum:
        raise invalid(f"input '{key}' must be {dtype_name(spec.dtype.as_datatype_enum)}, got "
                      f"{dtype_name(proto.dtype)}")
    if proto.tensor_shape.unknown_rank:
        raise invalid(f"input '{key}' has an unknown rank; give its shape")
    shape = [d.size for d in proto.tensor_shape.dim]
    n = check_shape(key, shape, spec, limits, batched)
    field, per_element = _val_field(spec.dtype)
    values = getattr(proto, field)
    if spec.dtype == tf.string:
        if proto.tensor_content:
            raise invalid(f"input '{key}' is DT_STRING: send its values in string_val, not "
                          "tensor_content")
        if len(values) > n:
            raise invalid(f"input '{key}' has {len(values)} strings for shape {shape} "
                          f"({n} elements)")
        # TF semantics: fewer values than elements repeat the last one.
        size = sum(len(v) for v in values) + (n - len(values)) * (len(values[-1]) if values else 0)
        if size > limits.max_request_bytes:
            raise invalid(f"input '{key}' holds {size / 1e6:.1f} MB of strings, over the server's "
                          f"--max_request_bytes={limits.max_request_bytes}")
        out = np.empty(n, dtype=object)
        out[: len(values)] = list(values)
        out[len(values):] = values[-1] if values else b""
        return out.reshape(shape), size
    nbytes = n * spec.dtype.size
    if proto.tensor_content:
        if len(proto.tensor_content) != nbytes:
            raise invalid(f"input '{key}' has {len(proto.tensor_content)} bytes of "
                          f"tensor_content; shape {shape} of {spec.dtype.name} needs {nbytes}")
    elif len(values) > n * per_element:
        raise invalid(f"input '{key}' has {len(values) // per_element} values for shape {shape} "
                      f"({n} elements)")
    try:
        arr = tf.make_ndarray(proto)
    except Exception as e:  # noqa: BLE001  (checked above; anything left is the client's)
        raise invalid(f"input '{key}' is not a valid {spec.dtype.name} tensor: "
                      f"{type(e).__name__}") from None
    return arr.reshape(shape), nbytes


def _json_leaf(key: str, x, dtype: tf.DType):
    if dtype == tf.string:
        if isinstance(x, str):
            return x.encode("utf-8", "surrogatepass")
        if isinstance(x, dict) and len(x) == 1 and isinstance(x.get("b64"), str):
            try:
                return base64.b64decode(x["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise invalid(f"input '{key}' has a {{\"b64\": ...}} value that is not valid "
                              "base64") from None
        raise invalid(f"input '{key}' is DT_STRING: values must be strings or {{\"b64\": "
                      f"\"...\"}}, got {type(x).__name__}")
    if dtype == tf.bool:
        if isinstance(x, bool):
            return x
        raise invalid(f"input '{key}' is DT_BOOL: values must be true or false")
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise invalid(f"input '{key}' is {dtype.name}: values must be numbers, got "
                      f"{type(x).__name__}")
    if dtype.is_integer:
        if isinstance(x, float):
            if not x.is_integer():
                raise invalid(f"input '{key}' is {dtype.name}: {echo(x)} is not an integer")
            x = int(x)
        if not dtype.min <= x <= dtype.max:
            raise invalid(f"input '{key}' is {dtype.name}: {echo(x)} is out of its range")
        return x
    if dtype.is_floating:
        try:
            return float(x)
        except OverflowError:
            raise invalid(f"input '{key}' is {dtype.name}: a value is too large") from None
    raise invalid(f"inputs of type {dtype.name} are not supported by this server")


def tensor_from_json(key: str, value, spec: tf.TensorSpec, limits: Limits,
                     batched: bool) -> tuple[np.ndarray, int]:
    """A REST JSON value (nested lists of leaves) -> (numpy array, its byte size).

    The value is walked level by level without recursion: every list at one depth must have the
    same length (no ragged tensors), the rank must be the signature's, and the shape passes
    `check_shape` before any array is built.
    """
    want_rank = spec.shape.rank
    shape, level = [], [value]
    while level and isinstance(level[0], list):
        if want_rank is not None and len(shape) >= want_rank:
            raise invalid(f"input '{key}' must have rank {want_rank} (shape {spec.shape}), got "
                          "a deeper nesting")
        if len(shape) >= MAX_RANK:
            raise invalid(f"input '{key}' is nested deeper than {MAX_RANK}")
        width = len(level[0])
        if any(not isinstance(x, list) or len(x) != width for x in level):
            raise invalid(f"input '{key}' is ragged or mixes lists and values at depth "
                          f"{len(shape)}; tensors must be rectangular")
        shape.append(width)
        level = [y for x in level for y in x]
    if any(isinstance(x, list) for x in level):
        raise invalid(f"input '{key}' is ragged or mixes lists and values")
    check_shape(key, shape, spec, limits, batched)
    leaves = [_json_leaf(key, x, spec.dtype) for x in level]
    if spec.dtype == tf.string:
        size = sum(len(b) for b in leaves)
        if size > limits.max_request_bytes:
            raise invalid(f"input '{key}' holds {size / 1e6:.1f} MB of strings, over the "
                          f"server's --max_request_bytes={limits.max_request_bytes}")
        arr = np.empty(len(leaves), dtype=object)
        arr[:] = leaves
        return arr.reshape(shape), size
    arr = np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    return arr, arr.nbytes


def check_request(key_specs: dict, arrays: dict, sizes: dict, limits: Limits, batched: bool,
                  scalar_limits: dict | None = None) -> None:
    """Checks across inputs: total bytes, equal batch rows, scalar inputs within the ranges the
    export declares (`scalar_limits`: name -> (low, high))."""
    total = sum(sizes.values())
    if total > limits.max_request_bytes:
        raise invalid(f"request inputs are {total / 1e6:.1f} MB, over the server's "
                      f"--max_request_bytes={limits.max_request_bytes}")
    if batched:
        rows = {k: a.shape[0] for k, a in arrays.items()}
        if len(set(rows.values())) > 1:
            raise invalid(f"inputs must have the same number of rows, got {rows}")
    for name, (low, high) in (scalar_limits or {}).items():
        arr = arrays.get(name)
        if arr is not None and arr.size == 1:
            v = arr.reshape(()).item()
            if not low <= v <= high:
                raise invalid(f"{name} must be between {low} and {high}, got {echo(v)}")
