"""serving.validation: sizes are decided from what the client declared, before anything of that
size is built."""

import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2

from pgn_tf.serving.status import Code, RequestError, from_exception, redact, tf_message
from pgn_tf.serving.validation import Limits, check_request, tensor_from_json, tensor_from_proto

ARTICLES = tf.TensorSpec([None], tf.string)
SCALAR = tf.TensorSpec([], tf.int32)
LIMITS = Limits(max_request_bytes=1_000_000, max_batch_rows=8)


def refused(fn, *args, match=""):
    with pytest.raises(RequestError) as e:
        fn(*args)
    assert e.value.code == Code.INVALID_ARGUMENT and match in e.value.message, e.value.message
    return e.value.message


def strings(values, dims):
    p = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING)
    p.string_val.extend(values)
    for d in dims:
        p.tensor_shape.dim.add(size=d)
    return p


@pytest.mark.parametrize("dims, spec, match", [
    ([10**9], ARTICLES, "1000000000 rows, over the server's --max_batch_rows=8"),
    ([4, 10**8], tf.TensorSpec([None, None], tf.string), "over the server's --max_request_bytes"),
    ([10**9], tf.TensorSpec(None, tf.string), "over the server's --max_request_bytes"),
    ([-3], ARTICLES, "negative dimension"),
    ([2, 2], ARTICLES, "must have rank 1"),
    ([1] * 40, tf.TensorSpec(None, tf.string), "rank 40, over 16"),
])
def test_declared_shapes_are_refused_before_anything_is_built(dims, spec, match):
    proto = strings([b""], dims)
    tracemalloc.start()
    try:
        refused(tensor_from_proto, "articles", proto, spec, LIMITS, spec.shape.rank is not None,
                match=match)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # what tf.make_ndarray would have padded: 10^8+ strings


def test_string_val_pads_to_the_declared_shape_as_tf_does():
    arr, size = tensor_from_proto("articles", strings([b"ab", b"cde"], [5]), ARTICLES, LIMITS,
                                  True)
    assert arr.dtype == object and arr.tolist() == [b"ab", b"cde", b"cde", b"cde", b"cde"]
    assert size == 2 + 3 * 4
    refused(tensor_from_proto, "articles", strings([b"x" * 300_000], [4]), ARTICLES, LIMITS, True,
            match="1.2 MB of strings")  # one string, padded 4 times: counted before padding
    refused(tensor_from_proto, "articles", strings([b"a", b"b", b"c"], [2]), ARTICLES, LIMITS,
            True, match="3 strings for shape [2]")


@pytest.mark.parametrize("dtype", [d for d in types_pb2.DataType.values()
                                   if d not in (types_pb2.DT_STRING, types_pb2.DT_INVALID)])
def test_every_other_dtype_is_refused_for_a_string_input(dtype):
    proto = tensor_pb2.TensorProto(dtype=dtype, tensor_content=b"\x00" * 8)
    proto.tensor_shape.dim.add(size=10**9)
    refused(tensor_from_proto, "articles", proto, ARTICLES, LIMITS, True,
            match="must be DT_STRING, got")


def test_numeric_tensors_are_checked_against_their_declared_size():
    good = tf.make_tensor_proto(np.int32(7))
    arr, size = tensor_from_proto("beam_size", good, SCALAR, LIMITS, False)
    assert arr.item() == 7 and size == 4
    bad = tf.make_tensor_proto(np.int32(7))
    bad.tensor_content = b"\x01\x02\x03"
    refused(tensor_from_proto, "beam_size", bad, SCALAR, LIMITS, False, match="3 bytes")
    big = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
    big.tensor_shape.dim.add(size=10**9)
    refused(tensor_from_proto, "ids", big, tf.TensorSpec(None, tf.int32), LIMITS, False,
            match="4000.0 MB")
    unknown = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
    unknown.tensor_shape.unknown_rank = True
    refused(tensor_from_proto, "beam_size", unknown, SCALAR, LIMITS, False, match="unknown rank")


def test_json_strings_are_object_arrays_not_fixed_width_unicode():
    big = "x" * 100_000
    arr, size = tensor_from_json("articles", [big] + [""] * 7, ARTICLES, LIMITS, True)
    assert arr.dtype == object and arr.nbytes == 8 * 8  # pointers, not 8 x 400 kB of UCS-4
    assert size == 100_000
    arr, _ = tensor_from_json("articles", [{"b64": "aGk="}, "é"], ARTICLES, LIMITS, True)
    assert arr.tolist() == [b"hi", "é".encode()]


@pytest.mark.parametrize("value, spec, match", [
    ([["a"], "b"], ARTICLES, "must have rank 1"),
    ([["a"], "b"], tf.TensorSpec([None, None], tf.string), "ragged"),
    ([["a", "b"], ["c"]], tf.TensorSpec([None, None], tf.string), "ragged"),
    ([["a"]], ARTICLES, "must have rank 1"),
    ("a", ARTICLES, "must have rank 1"),
    (["a"] * 9, ARTICLES, "--max_batch_rows=8"),
    ([{"b64": "@@@"}], ARTICLES, "not valid base64"),
    ([{"b64": "aGk=", "x": 1}], ARTICLES, "must be strings"),
    ([None], ARTICLES, "got NoneType"),
    ([1.5], ARTICLES, "got float"),
    (2**40, SCALAR, "out of its range"),
    (1.5, SCALAR, "not an integer"),
    (True, SCALAR, "must be numbers"),
    ("3", SCALAR, "must be numbers"),
    (["x" * 600_000, "y" * 600_000], ARTICLES, "1.2 MB of strings"),
])
def test_bad_json_values(value, spec, match):
    refused(tensor_from_json, "x", value, spec, LIMITS, spec.shape.rank == 1, match=match)


def test_request_level_checks():
    a = np.array([b"x"] * 3, dtype=object)
    b = np.array([b"y"] * 2, dtype=object)
    refused(check_request, {}, {"a": a, "b": b}, {"a": 3, "b": 2}, LIMITS, True,
            match="same number of rows")
    refused(check_request, {}, {"a": a}, {"a": 2_000_000}, LIMITS, True, match="2.0 MB")
    refused(check_request, {}, {"beam_size": np.int32(40)}, {"beam_size": 4}, LIMITS, False,
            {"beam_size": (1, 16)}, match="beam_size must be between 1 and 16, got 40")
    check_request({}, {"beam_size": np.int32(4)}, {"beam_size": 4}, LIMITS, False,
                  {"beam_size": (1, 16)})


def test_errors_become_statuses_without_paths():
    assert redact("open failed: /home/u/models/pgn/1/saved_model.pb: no such file\nmore") == \
        "open failed: <path>: no such file"
    assert "gs://" not in redact("cannot read gs://bucket/models/pgn/1")
    err = tf.errors.InvalidArgumentError(
        None, None, "Graph execution error:\n\nDetected at node x/Assert\nassertion failed: "
                    "[beam_size must be between 1 and 16, got] [40]\n\t [[{{node x}}]]")
    assert tf_message(err) == "beam_size must be between 1 and 16, got 40"
    assert from_exception(err).code == Code.INVALID_ARGUMENT
    oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
    assert from_exception(oom).code == Code.RESOURCE_EXHAUSTED
    assert from_exception(MemoryError()).code == Code.RESOURCE_EXHAUSTED
    internal = from_exception(KeyError("/secret/path"))
    assert internal.code == Code.INTERNAL and "/secret" not in internal.message
