"""serving.fuzz: a short seeded campaign over the request decoders finds nothing and exercises
both the accepted and the refused paths of gRPC and REST; the harness calls a server fault a
finding; the structure-aware mutators keep requests well-formed and reach validation's edges;
hostile requests (TensorFlow's CHECK-failure shapes, and every reproducer a campaign found) are
answered with a client's error in a child process."""

import importlib.util
import json
import random

import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2

from pgn_tf.serving import fuzz, fuzz_harness, fuzz_mutators

ALL = fuzz_harness.TARGETS["all"]
PREDICT = ALL.index(fuzz_harness.GRPC_METHODS[0])
REST = ALL.index(fuzz_harness.REST_METHODS[0])


def test_atheris_is_installed():
    """The campaigns need atheris: the test extra installs it (setup.py's fuzz extra). A missing
    atheris fails here, never skips."""
    assert importlib.util.find_spec("atheris") is not None, (
        "atheris is missing: pip install -e '.[test]' (or '.[fuzz]')")


def test_a_short_seeded_campaign_finds_nothing_and_exercises_both_paths(tmp_path):
    r = fuzz.run_campaign("all", 5000, seed=20261128, out_dir=str(tmp_path),
                          wall_timeout_s=900)
    with open(r.log, errors="replace") as f:
        tail = f.read()[-3000:]
    assert r.returncode == 0 and not (r.crashes or r.timeouts or r.ooms), tail
    assert r.executed >= 5000, tail
    for kind in ("grpc", "rest"):
        accepted, refused = r.tally(kind)
        assert accepted > 0 and refused > 0, (kind, r.outcomes)
    # past the seeds: coverage grew, and Predict was answered in several ways
    assert r.new_units > 0 and r.cov > 100, r.summary()
    assert {"grpc Predict OK", "grpc Predict INVALID_ARGUMENT",
            "grpc Predict NOT_FOUND"} <= set(r.outcomes), r.outcomes


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("fuzz"))
    fuzz_harness.write_stand_in_export(base)
    return fuzz_harness.Harness(base, ALL)


def predict_input(name="pgn", **inputs) -> bytes:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    for k, v in inputs.items():
        req.inputs[k].CopyFrom(v if isinstance(v, tensor_pb2.TensorProto)
                               else tf.make_tensor_proto(v))
    return bytes([PREDICT]) + req.SerializeToString()


def rest_input(body) -> bytes:
    return bytes([REST]) + (body if isinstance(body, bytes) else json.dumps(body).encode())


def test_the_harness_answers_and_counts(harness):
    assert harness.one(predict_input(articles=[b"a b c ."])) == "grpc Predict OK"
    assert harness.one(predict_input(name="nope", articles=[b"a"])) == "grpc Predict NOT_FOUND"
    assert harness.one(rest_input({"instances": ["a b c ."]})) == "rest predict 200"
    assert harness.one(rest_input(b"{")) == "rest predict 400"
    assert harness.one(bytes([ALL.index(fuzz_harness.GRPC_METHODS[3])])) == "grpc Classify UNIMPLEMENTED"
    assert harness.counts["grpc Predict OK"] >= 1


def test_a_server_fault_is_a_finding(harness, monkeypatch):
    from pgn_tf.serving import validation

    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(validation, "tensor_from_proto", broken)
    monkeypatch.setattr(validation, "tensor_from_json", broken)
    with pytest.raises(fuzz_harness.Finding, match="Predict answered INTERNAL"):
        harness.one(predict_input(articles=[b"a"]))
    with pytest.raises(fuzz_harness.Finding, match="answered HTTP 500"):
        harness.one(rest_input({"instances": ["a"]}))


def test_a_message_naming_the_export_path_is_a_finding(harness, monkeypatch):
    from pgn_tf.serving import validation
    from pgn_tf.serving.status import invalid

    def leaky(*args, **kwargs):
        raise invalid(f"cannot read {harness.base}/pgn/1/variables")

    monkeypatch.setattr(validation, "tensor_from_json", leaky)
    with pytest.raises(fuzz_harness.Finding, match="names the export's path"):
        harness.one(rest_input({"instances": ["a"]}))


def _bytes_mutator(rng):
    def mutate(data: bytes, max_size: int) -> bytes:
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if b and rng.random() < 0.5:
                b[rng.randrange(len(b))] = rng.getrandbits(8)
            else:
                b.insert(rng.randint(0, len(b)), rng.getrandbits(8))
        return bytes(b[:max_size])
    return mutate


def test_the_mutator_keeps_requests_parseable_and_reaches_validation_edges():
    rng = random.Random(0)
    m = fuzz_mutators.Mutator(ALL, _bytes_mutator(rng), fuzz_harness.TEXTS)
    seed = predict_input(articles=[b"a b c ."])
    assert m(seed, 4096, 5) == m(seed, 4096, 5)  # the seed decides
    dims, dtypes, parsed, bodies = set(), set(), 0, 0
    data = seed
    for i in range(3000):
        out = m(data, 4096, i)
        assert 0 < len(out) <= 4096
        index, payload = fuzz_mutators.split_input(ALL, out)
        if ALL[index].request is predict_pb2.PredictRequest:
            req = predict_pb2.PredictRequest()
            try:
                req.ParseFromString(payload)
            except Exception:  # noqa: BLE001  (a byte mutation of the wire bytes)
                continue
            parsed += 1
            for t in req.inputs.values():
                dims.update(d.size for d in t.tensor_shape.dim)
                dtypes.add(t.dtype)
        elif ALL[index].kind == "rest":
            bodies += 1
        data = out if rng.random() < 0.7 else seed  # a corpus of one, as libFuzzer would grow
    assert parsed > 1000 and bodies > 0
    assert {0, 257, -1, 2**63 - 1} & dims == {0, 257, -1, 2**63 - 1}, sorted(dims)[:40]
    assert {types_pb2.DT_STRING, types_pb2.DT_INT32} < dtypes and len(dtypes) > 10


def test_the_json_mutator_changes_bodies_structurally():
    rng = random.Random(1)
    body = {"instances": ["a b c ."]}
    seen = set()
    for _ in range(500):
        new = fuzz_mutators.mutate_json(json.loads(json.dumps(body)), rng,
                                        _bytes_mutator(rng), fuzz_harness.TEXTS)
        seen.add(json.dumps(new, sort_keys=True)[:60])
        fuzz_mutators.dump_json(new, rng)  # always serializable
    assert len(seen) > 100


def _strings(dims, values=(b"a",), **fields):
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=list(values), **fields)
    for d in dims:
        t.tensor_shape.dim.add(size=d)
    return t


def _int32(content=None, dims=(), **fields):
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, **fields)
    if content is not None:
        t.tensor_content = content
    for d in dims:
        t.tensor_shape.dim.add(size=d)
    return t


def _options(**overrides) -> bytes:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "pgn"
    req.model_spec.signature_name = "summarize_options"
    req.inputs["articles"].CopyFrom(tf.make_tensor_proto([b"a b c ."]))
    for k in ("beam_size", "max_decode_steps", "min_decode_steps"):
        req.inputs[k].CopyFrom(overrides.get(k, tf.make_tensor_proto(2, tf.int32)))
    return bytes([PREDICT]) + req.SerializeToString()


# TensorProto shapes behind TensorFlow's CHECK-failure history (negative and overflowing dims,
# unknown rank, tensor_content of the wrong size, DT_VARIANT / DT_RESOURCE payloads, undeclared
# dtypes, ref dtypes), and REST bodies past the parser's limits, each with the answer it gets.
HOSTILE = [
    (predict_input(articles=_strings([-1])), "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=_strings([2**63 - 1])), "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=_strings([2**62, 2**62])), "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=_strings([0] * 17)), "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=_strings([1], tensor_shape={"unknown_rank": True})),
     "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=_strings([1], tensor_content=b"\x00" * 8)),
     "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=tensor_pb2.TensorProto(dtype=types_pb2.DT_VARIANT,
                                                   variant_val=[{"type_name": "x"}])),
     "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=tensor_pb2.TensorProto(dtype=types_pb2.DT_RESOURCE,
                                                   resource_handle_val=[{"device": "x"}])),
     "grpc Predict INVALID_ARGUMENT"),
    (predict_input(articles=tensor_pb2.TensorProto(dtype=1000)), "grpc Predict INVALID_ARGUMENT"),
    (_options(beam_size=_int32(b"\x01\x02\x03")), "grpc Predict INVALID_ARGUMENT"),
    (_options(beam_size=_int32(int_val=[1, 2])), "grpc Predict INVALID_ARGUMENT"),
    (_options(beam_size=_int32(dims=[2**31], int_val=[1])), "grpc Predict INVALID_ARGUMENT"),
    (_options(beam_size=tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32_REF, int_val=[1])),
     "grpc Predict INVALID_ARGUMENT"),
    (_options(beam_size=_int32(int_val=[2**31 - 1])), "grpc Predict INVALID_ARGUMENT"),
    (_options(), "grpc Predict OK"),
    (bytes([PREDICT]) + b"\x0a\xff\xff\xff\xff\x0f", "grpc Predict INVALID_ARGUMENT"),
    (rest_input(b"[" * 100_000), "rest predict 400"),
    (rest_input(b'{"instances": ["\xff\xfe"]}'), "rest predict 400"),
    (rest_input({"instances": [[[["a"]]]]}), "rest predict 400"),
    (rest_input(b'{"instances": [1e400]}'), "rest predict 400"),
    (rest_input({"instances": [{"b64": "!!"}]}), "rest predict 400"),
    (rest_input({"signature_name": "summarize_options",
                 "inputs": {"articles": ["a"], "beam_size": 2**63, "max_decode_steps": 3,
                            "min_decode_steps": 0}}), "rest predict 400"),
]
# Reproducers of findings (crash-* files of campaigns), each with the answer its fix gives.
REPRODUCERS: list = []


def test_hostile_requests_and_reproducers_get_a_clients_error(tmp_path):
    cases = HOSTILE + REPRODUCERS
    r = fuzz.replay("all", [data for data, _ in cases], str(tmp_path))
    with open(r.log, errors="replace") as f:
        tail = f.read()[-3000:]
    assert r.returncode == 0, tail
    assert r.outcomes == [want for _, want in cases], tail
