"""The serving contract (pgn_tf.saved_model.contract): written once inside the SavedModel, read by the
server when a version loads, and read fail-closed: a version whose contract cannot be read gets
the conservative budget and one warning, never no budget."""

import json
import logging
import os
import shutil

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from pgn_tf.saved_model import contract as sc
from pgn_tf.serving.models import LoadedVersion
from pgn_tf.serving.predict import Predictor
from pgn_tf.serving.service import Server
from pgn_tf.serving.validation import Limits
from tests.serving.helpers import ARTICLE, request, stub, summaries

CONTRACT = sc.ServingContract(
    beam_size=4, max_decode_steps=16,
    input_limits={sc.SUMMARIZE_OPTIONS: {sc.BEAM_SIZE: (1, 16), sc.MAX_DECODE_STEPS: (1, 400),
                                         sc.MIN_DECODE_STEPS: (0, 400)}})


def options_inputs(rows, beam, max_steps, min_steps=0):
    return {sc.ARTICLES: [ARTICLE] * rows,
            sc.BEAM_SIZE: tf.make_tensor_proto(beam, tf.int32),
            sc.MAX_DECODE_STEPS: tf.make_tensor_proto(max_steps, tf.int32),
            sc.MIN_DECODE_STEPS: tf.make_tensor_proto(min_steps, tf.int32)}


def runs(srv, name, signature):
    """How many model runs the server made of `signature` (its batch_size histogram's count)."""
    return srv.metrics.registry.get_sample_value(
        ":tensorflow:serving:batch_size_count",
        {"model_name": name, "version": "1", "signature": signature}) or 0


def contract_warnings(caplog):
    return [r for r in caplog.records
            if r.name == "serving" and "serving contract" in r.getMessage()]


# --- the contract itself: pure Python, no TensorFlow --------------------------------------------

def test_json_round_trip():
    text = CONTRACT.to_json()
    assert sc.ServingContract.from_json(text) == CONTRACT
    assert sc.ServingContract.from_json(text.encode()) == CONTRACT
    raw = json.loads(text)
    assert raw["version"] == sc.CONTRACT_VERSION
    assert raw["decode_defaults"] == {"beam_size": 4, "max_decode_steps": 16}
    assert raw["input_limits"]["summarize_options"]["beam_size"] == [1, 16]
    assert raw["signatures"]["summarize_options"] == [
        "articles", "beam_size", "max_decode_steps", "min_decode_steps"]
    assert sc.ServingContract.from_json(sc.CONSERVATIVE.to_json()) == sc.CONSERVATIVE


def test_the_conservative_contract_is_a_default_exports_budget():
    from pgn_tf.config import DecodeConfig

    c = sc.CONSERVATIVE
    assert (c.beam_size, c.max_decode_steps) == (DecodeConfig.beam_size,
                                                DecodeConfig.max_dec_steps) == (4, 120)
    assert c.input_limits[sc.SUMMARIZE_OPTIONS] == {
        sc.BEAM_SIZE: (1, 4), sc.MAX_DECODE_STEPS: (1, 120), sc.MIN_DECODE_STEPS: (0, 120)}


def _without(raw: dict, dotted: str) -> dict:
    raw = json.loads(json.dumps(raw))
    *parents, last = dotted.split(".")
    node = raw
    for p in parents:
        node = node[p]
    del node[last]
    return raw


@pytest.mark.parametrize("missing", [
    "version", "signatures", "decode_defaults", "decode_defaults.beam_size",
    "decode_defaults.max_decode_steps", "input_limits",
    "input_limits.summarize_options.max_decode_steps",
])
def test_a_contract_with_a_missing_key_is_unreadable(missing):
    text = json.dumps(_without(json.loads(CONTRACT.to_json()), missing))
    with pytest.raises(sc.ContractError) as e:
        sc.ServingContract.from_json(text)
    assert missing.split(".")[-1] in str(e.value)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not JSON"),
    ("[" * 100_000, "bytes, over"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
    ('["a list"]', "must be a JSON object"),
    (json.dumps({**json.loads(CONTRACT.to_json()), "version": 2}), "version 2"),
    (json.dumps({**json.loads(CONTRACT.to_json()), "decode_defaults":
                 {"beam_size": True, "max_decode_steps": 16}}), "must be an integer"),
    (json.dumps({**json.loads(CONTRACT.to_json()), "decode_defaults":
                 {"beam_size": 0, "max_decode_steps": 16}}), "at least 1"),
    (CONTRACT.to_json().replace("[1, 16]", "[17, 16]"), "above high"),
    (CONTRACT.to_json().replace("[1, 16]", "[1, NaN]"), "must be an integer"),
])
def test_a_bad_contract_is_unreadable(text, message):
    with pytest.raises(sc.ContractError, match=message):
        sc.ServingContract.from_json(text)


def test_a_shortlist_input_needs_its_range():
    """A shortlisted export's summarize_options takes `shortlist`; a contract listing it
    without a range is unreadable (a server never runs it unchecked), with one it reads."""
    raw = json.loads(CONTRACT.to_json())
    raw["signatures"][sc.SUMMARIZE_OPTIONS].append(sc.SHORTLIST)
    with pytest.raises(sc.ContractError, match="no input_limits.summarize_options for "
                                               "\\['shortlist'\\]"):
        sc.ServingContract.from_json(json.dumps(raw))
    raw["input_limits"][sc.SUMMARIZE_OPTIONS][sc.SHORTLIST] = [0, 50000]
    got = sc.ServingContract.from_json(json.dumps(raw))
    assert got.input_limits[sc.SUMMARIZE_OPTIONS][sc.SHORTLIST] == (0, 50000)


def test_importing_the_contract_starts_no_tensorflow():
    import subprocess
    import sys

    code = ("import sys, pgn_tf.saved_model.contract; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- a version dir holding only saved_model.pb and variables/ of the real export ---------------

@pytest.fixture(scope="module")
def bare_base(exported, tmp_path_factory):
    """BASE/1 holding only saved_model.pb and variables/ of the test export (no assets.extra/:
    no config.json, no warm-up file)."""
    _, _, path = exported
    base = tmp_path_factory.mktemp("bare") / "pgn"
    os.makedirs(base / "1")
    shutil.copy(os.path.join(path, "saved_model.pb"), base / "1" / "saved_model.pb")
    shutil.copytree(os.path.join(path, "variables"), base / "1" / "variables")
    return str(base)


@pytest.mark.slow
def test_a_bare_version_dir_keeps_the_contract_and_refuses_work_over_budget(bare_base, caplog):
    caplog.set_level(logging.WARNING, logger="serving")
    srv = Server({"pgn": bare_base}, poll_seconds=0)
    try:
        assert sorted(os.listdir(os.path.join(bare_base, "1"))) == ["saved_model.pb",
                                                                   "variables"]
        loaded = srv.predictor.resolve("pgn")
        assert loaded.contract_problem is None and not contract_warnings(caplog)
        assert loaded.decode_defaults[sc.MAX_DECODE_STEPS] == 16  # the export's, not 4 x 120
        budget = srv.predictor.work_budget(loaded)
        assert budget == 256 * loaded.decode_defaults[sc.BEAM_SIZE] * 16
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(request(options_inputs(256, 16, 400), signature=sc.SUMMARIZE_OPTIONS),
                              timeout=120)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = e.value.details()
        assert "256 rows x beam 16 x 400 steps = 1,638,400" in details, details
        assert f"--max_decode_work of {budget:,}" in details, details
        assert runs(srv, "pgn", sc.SUMMARIZE_OPTIONS) == 0  # refused before it ran
        ok = stub(srv).Predict(request(options_inputs(2, 2, 4), signature=sc.SUMMARIZE_OPTIONS),
                               timeout=120)
        assert len(summaries(ok)) == 2 and all(len(s.split()) <= 4 for s in summaries(ok))
        assert runs(srv, "pgn", sc.SUMMARIZE_OPTIONS) == 1
        with pytest.raises(grpc.RpcError) as e:  # the export's caps, read from the contract
            stub(srv).Predict(request(options_inputs(1, 17, 4), signature=sc.SUMMARIZE_OPTIONS),
                              timeout=60)
        assert "beam_size must be between 1 and 16, got 17" in e.value.details()
        assert runs(srv, "pgn", sc.SUMMARIZE_OPTIONS) == 1
    finally:
        srv.stop()


# --- versions whose contract cannot be read: the conservative budget and one log line ----------

class OptionsModel(tf.Module):
    """A tiny SavedModel with the summarizer's serving_default and summarize_options inputs (it
    echoes the articles), holding `contract` (any value) where pgn_tf.export puts the contract."""

    def __init__(self, contract=None):
        super().__init__()
        if contract is not None:
            setattr(self, sc.SAVED_MODEL_ATTR, [tf.Variable(contract)])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=sc.ARTICLES)])
    def serve(self, articles):
        return {"summaries": articles, "scores": tf.zeros(tf.shape(articles))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=sc.ARTICLES),
                                  tf.TensorSpec([], tf.int32, name=sc.BEAM_SIZE),
                                  tf.TensorSpec([], tf.int32, name=sc.MAX_DECODE_STEPS),
                                  tf.TensorSpec([], tf.int32, name=sc.MIN_DECODE_STEPS)])
    def options(self, articles, beam_size, max_decode_steps, min_decode_steps):
        work = tf.cast(beam_size * max_decode_steps, tf.float32)
        return {"summaries": articles, "scores": tf.fill(tf.shape(articles), work)}


TINY_SIGNATURES = {sc.SERVING_DEFAULT: (sc.ARTICLES,),
                   sc.SUMMARIZE_OPTIONS: sc.SIGNATURE_INPUTS[sc.SUMMARIZE_OPTIONS]}


def write_options_model(path, contract=None) -> str:
    m = OptionsModel(contract)
    tf.saved_model.save(m, str(path), signatures={sc.SERVING_DEFAULT: m.serve,
                                                  sc.SUMMARIZE_OPTIONS: m.options})
    return str(path)


def test_a_readable_contract_on_a_tiny_model_is_used(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="serving")
    contract = sc.ServingContract(beam_size=2, max_decode_steps=10, signatures=TINY_SIGNATURES,
                                  input_limits=CONTRACT.input_limits)
    path = write_options_model(tmp_path / "m", contract.to_json())
    loaded = LoadedVersion("m", 3, path)
    assert loaded.contract == contract and loaded.contract_problem is None
    assert not contract_warnings(caplog)
    assert Predictor(None, Limits()).work_budget(loaded) == 256 * 2 * 10


GOOD = sc.ServingContract(beam_size=2, max_decode_steps=10, signatures=TINY_SIGNATURES,
                          input_limits=CONTRACT.input_limits).to_json()


@pytest.mark.parametrize("contract, problem", [
    (None, "holds none"),
    ("{not json", "not JSON"),
    (GOOD.replace('"version": 1', '"version": 7'), "version 7"),
    (json.dumps(_without(json.loads(GOOD), "decode_defaults.beam_size")), "beam_size"),
    (1.5, "not a string"),
    (CONTRACT.to_json(), "summarize_verbose"),  # names a signature this SavedModel lacks
], ids=["missing", "unparsable", "wrong-version", "missing-key", "not-a-string", "mismatch"])
def test_an_unreadable_contract_gets_the_conservative_budget_and_one_log_line(
        tmp_path, caplog, contract, problem):
    caplog.set_level(logging.WARNING, logger="serving")
    path = write_options_model(tmp_path / "m", contract)
    loaded = LoadedVersion("tiny", 7, path)
    assert loaded.contract == sc.CONSERVATIVE and problem in loaded.contract_problem
    (record,) = contract_warnings(caplog)
    line = record.getMessage()
    assert "model tiny version 7" in line and problem in line and "conservative" in line
    assert path not in line
    assert loaded.input_limits[sc.SUMMARIZE_OPTIONS][sc.BEAM_SIZE] == (1, 4)
    assert Predictor(None, Limits()).work_budget(loaded) == 256 * 4 * 120


def test_a_served_version_without_a_contract_refuses_work_over_the_conservative_budget(
        tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="serving")
    base = tmp_path / "m"
    write_options_model(base / "1")
    srv = Server({"m": str(base)}, poll_seconds=0)
    try:
        (record,) = contract_warnings(caplog)
        assert "model m version 1" in record.getMessage()
        big = request(options_inputs(256, 16, 400), name="m", signature=sc.SUMMARIZE_OPTIONS)
        with pytest.raises(grpc.RpcError) as e:
            stub(srv).Predict(big, timeout=60)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = e.value.details()
        assert "beam_size must be between 1 and 4, got 16" in details, details
        assert "no readable serving contract" in details and "conservative budget" in details
        assert "at most 122,880" in details, details
        assert runs(srv, "m", sc.SUMMARIZE_OPTIONS) == 0
        ok = stub(srv).Predict(request(options_inputs(256, 4, 120), name="m",
                                       signature=sc.SUMMARIZE_OPTIONS), timeout=60)
        assert len(summaries(ok)) == 256 and runs(srv, "m", sc.SUMMARIZE_OPTIONS) == 1
        ok = stub(srv).Predict(request({sc.ARTICLES: ["a", "b"]}, name="m"), timeout=60)
        assert summaries(ok) == ["a", "b"]
        assert len(contract_warnings(caplog)) == 1  # one line for the version, not per request
    finally:
        srv.stop()


def test_a_warmup_request_over_the_conservative_limits_is_skipped_not_a_failed_load(tmp_path):
    base = tmp_path / "m"
    path = write_options_model(base / "1")
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra)
    with tf.io.TFRecordWriter(os.path.join(extra, "tf_serving_warmup_requests")) as w:
        for req in (request(options_inputs(1, 8, 200), name="m", signature=sc.SUMMARIZE_OPTIONS),
                    request(options_inputs(1, 2, 10), name="m", signature=sc.SUMMARIZE_OPTIONS)):
            w.write(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=req)).SerializeToString())
    srv = Server({"m": str(base)}, poll_seconds=0)
    try:
        assert srv.registry.models["m"].loaded_versions() == [1]
        assert runs(srv, "m", sc.SUMMARIZE_OPTIONS) == 1  # the second record ran, not the first
        scores = tf.make_ndarray(stub(srv).Predict(request(
            options_inputs(1, 3, 5), name="m", signature=sc.SUMMARIZE_OPTIONS)).outputs["scores"])
        assert np.allclose(scores, 15.0)
    finally:
        srv.stop()
