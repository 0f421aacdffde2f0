"""serving.server with the stock tensorflow-serving-api stubs and REST, in-process on loopback."""

import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from pgn_tf.inference import Summarizer
from serving import client
from serving.batching import Batcher, BatchingParameters, QueueFull, parse_batching_parameters
from serving.server import Server, read_model_config

ARTICLE = ("zorblax , a pilot from quenton , sold 5512 boxes of apples on friday . "
           "officials said zorblax sold 5512 boxes of apples .")


@pytest.fixture(scope="module")
def server(exported):
    base, name, _ = exported
    srv = Server({name: (os.path.join(base, name), 1)}, port=0, rest_port=0, poll_seconds=0.2)
    yield srv
    srv.stop()


def stub(srv):
    return prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{srv.port}",
                              options=[("grpc.max_send_message_length", 256 * 2**20)]))


def request(inputs, name="pgn", signature="", version=None):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    req.model_spec.signature_name = signature
    if version is not None:
        req.model_spec.version.value = version
    for k, v in inputs.items():
        req.inputs[k].CopyFrom(v if isinstance(v, tensor_pb2.TensorProto) else tf.make_tensor_proto(v))
    return req


def rest(srv, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{srv.rest_port}{path}", data=data)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_grpc_and_rest_answer_like_summarize(server, trained_model_dir):
    want = Summarizer.from_model_dir(trained_model_dir).summarize(
        tf.constant([ARTICLE]))["summaries"].numpy()[0].decode()
    assert client.summarize(f"127.0.0.1:{server.port}", "pgn", [ARTICLE]) == [want]
    assert client.summarize_rest(f"127.0.0.1:{server.rest_port}", "pgn", [ARTICLE]) == [want]
    code, body = rest(server, "/v1/models/pgn/versions/1:predict", {"inputs": {"articles": [ARTICLE]}})
    assert code == 200 and body["outputs"]["summaries"] == [want]
    resp = stub(server).Predict(request({"articles": [ARTICLE]}, version=1))
    assert resp.model_spec.version.value == 1


def test_metadata_and_status(server):
    meta_req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    meta_req.model_spec.name = "pgn"
    meta = stub(server).GetModelMetadata(meta_req)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    meta.metadata["signature_def"].Unpack(sigs)
    assert {"serving_default", "summarize_verbose"} <= set(sigs.signature_def)
    assert set(sigs.signature_def["serving_default"].inputs) == {"articles"}
    st_req = get_model_status_pb2.GetModelStatusRequest()
    st_req.model_spec.name = "pgn"
    st = model_service_pb2_grpc.ModelServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{server.port}")).GetModelStatus(st_req)
    assert [(s.version, s.state) for s in st.model_version_status] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
    assert rest(server, "/v1/models/pgn")[1]["model_version_status"][0]["state"] == "AVAILABLE"
    code, body = rest(server, "/v1/models/pgn/metadata")
    assert code == 200 and "serving_default" in body["metadata"]["signature_def"]["signature_def"]


@pytest.mark.parametrize("inputs, kw, code, message", [
    ({"text": [ARTICLE]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "missing ['articles']"),
    ({"articles": [1, 2]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "must be DT_STRING"),
    ({"articles": [[ARTICLE]]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "rank 1"),
    ({"articles": ARTICLE}, {}, grpc.StatusCode.INVALID_ARGUMENT, "rank 1"),
    ({"articles": [ARTICLE]}, {"signature": "nope"}, grpc.StatusCode.INVALID_ARGUMENT, "not found"),
    ({"articles": [ARTICLE]}, {"name": "nope"}, grpc.StatusCode.NOT_FOUND, "not served"),
    ({"articles": [ARTICLE]}, {"version": 7}, grpc.StatusCode.NOT_FOUND, "version 7"),
    ({"articles": ["x" * 50_000_000]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "max_request_bytes"),
])
def test_bad_grpc_requests(server, inputs, kw, code, message):
    with pytest.raises(grpc.RpcError) as e:
        stub(server).Predict(request(inputs, **kw), timeout=60)
    assert e.value.code() == code and message in e.value.details()


def test_non_utf8_article_is_summarized(server):
    resp = stub(server).Predict(request({"articles": [b"\xff\xfe caf\xc3 broken"]}))
    tf.make_ndarray(resp.outputs["summaries"])[0].decode("utf-8")


@pytest.mark.parametrize("path, raw, code", [
    ("/v1/models/pgn:predict", b"{not json", 400),
    ("/v1/models/pgn:predict", b'{"instances": ["\xff\xfe"]}', 400),
    ("/v1/models/pgn:predict", b'{"instances": [1, 2]}', 400),
    ("/v1/models/pgn:predict", b'{"signature_name": "x", "instances": ["a"]}', 400),
    ("/v1/models/pgn:predict", b'{"instances": ["a"], "inputs": ["a"]}', 400),
    ("/v1/models/nope:predict", b'{"instances": ["a"]}', 404),
    ("/v2/whatever", b"{}", 404),
])
def test_bad_rest_requests(server, path, raw, code):
    got, body = rest(server, path, raw=raw)
    assert got == code and body["error"]


def test_fuzz_then_a_good_request_succeeds(server):
    rng = random.Random(0)
    s = stub(server)
    raw = grpc.insecure_channel(f"127.0.0.1:{server.port}").unary_unary(
        "/tensorflow.serving.PredictionService/Predict",
        request_serializer=lambda b: b, response_deserializer=lambda b: b)
    dtypes = [tf.string, tf.int32, tf.float32, tf.int64, tf.bool]
    sent = 0
    for i in range(700):
        kind = i % 3
        try:
            if kind == 0:  # random bytes as a request
                raw(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))), timeout=10)
            else:
                req = predict_pb2.PredictRequest()
                req.model_spec.name = rng.choice(["pgn", "", "x" * rng.randint(1, 9)])
                req.model_spec.signature_name = rng.choice(["", "serving_default", "bogus"])
                key = rng.choice(["articles", "article", ""])
                t = req.inputs[key]
                t.dtype = rng.choice(dtypes).as_datatype_enum
                for _ in range(rng.randint(0, 3)):
                    t.tensor_shape.dim.add(size=rng.randint(-2, 3))
                t.tensor_content = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 16)))
                s.Predict(req, timeout=30)
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.UNAVAILABLE
        sent += 1
    for _ in range(300):
        body = rng.choice([
            b"", b"[]", b"null", b'{"instances": {}}', b'{"inputs": {"articles": [[1], "a"]}}',
            b'{"instances": [{"articles": 3}]}', b'{"instances": [{"b64": "@@@"}]}',
            bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40))),
        ])
        code, _ = rest(server, "/v1/models/pgn:predict", raw=body)
        assert code in (400, 404)
        sent += 1
    assert sent >= 1000
    assert client.summarize(f"127.0.0.1:{server.port}", "pgn", [ARTICLE])[0]


def test_batching_under_load_and_hot_swap_with_zero_failures(exported, tmp_path):
    base, name, path = exported
    model_base = tmp_path / name
    shutil.copytree(path, model_base / "1")
    params = BatchingParameters(max_batch_size=8, batch_timeout_micros=20_000,
                                max_enqueued_batches=64, num_batch_threads=1)
    srv = Server({name: (str(model_base), 1)}, port=0, rest_port=None, batching=params,
                 poll_seconds=0.2)
    stop = threading.Event()
    failures, versions, count = [], set(), [0]
    lock = threading.Lock()

    def worker():
        st = stub(srv)
        while not stop.is_set():
            try:
                r = st.Predict(request({"articles": [ARTICLE]}), timeout=120)
                with lock:
                    count[0] += 1
                    versions.add(r.model_spec.version.value)
            except grpc.RpcError as e:
                failures.append(e.details())

    threads = [threading.Thread(target=worker) for _ in range(16)]
    try:
        for t in threads:
            t.start()
        time.sleep(4)
        # a new version arrives the way pgn_tf.export writes it: a temp name, then a rename
        shutil.copytree(path, model_base / ".tmp-2")
        os.rename(model_base / ".tmp-2", model_base / "2")
        deadline = time.time() + 60
        while 2 not in versions and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        srv.stop()
    assert not failures, failures[:3]
    assert count[0] >= 16 and versions == {1, 2}


def test_broken_version_is_skipped_and_old_one_keeps_serving(exported, tmp_path):
    base, name, path = exported
    shutil.copytree(path, tmp_path / name / "1")
    srv = Server({name: (str(tmp_path / name), 1)}, port=0, rest_port=None, poll_seconds=0.2)
    try:
        broken = tmp_path / name / "5"
        broken.mkdir()
        (broken / "saved_model.pb").write_bytes(b"half a model")
        time.sleep(1.5)
        assert client.summarize(f"127.0.0.1:{srv.port}", name, [ARTICLE])[0]
        status = dict((v, (s, m)) for v, s, m in srv.registry.models[name].status())
        assert status[1][0] == "AVAILABLE" and status[5][0] == "END" and "failed" in status[5][1]
    finally:
        srv.stop()


def test_full_queue_refuses_instead_of_growing():
    release = threading.Event()
    started = threading.Event()

    def slow(inputs):
        started.set()
        release.wait(10)
        return inputs

    b = Batcher(slow, BatchingParameters(max_batch_size=1, batch_timeout_micros=0,
                                         max_enqueued_batches=1, num_batch_threads=1))
    x = {"a": np.array([b"x"], dtype=object)}
    first = threading.Thread(target=lambda: b.submit(x, timeout=10))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=lambda: b.submit(x, timeout=10))
    second.start()
    time.sleep(0.2)
    with pytest.raises(QueueFull):
        b.submit(x, timeout=1)
    release.set()
    first.join()
    second.join()
    b.close()


def test_batching_parameters_and_model_config_files(tmp_path):
    text = open(os.path.join(os.path.dirname(__file__), "..", "serving", "batching.config")).read()
    p = parse_batching_parameters(text)
    assert (p.max_batch_size, p.batch_timeout_micros, p.num_batch_threads) == (32, 10000, 2)
    with pytest.raises(ValueError, match="bad batching parameters"):
        parse_batching_parameters("max_batch_size: 3")
    cfg = read_model_config(os.path.join(os.path.dirname(__file__), "..", "serving", "models.config"))
    assert cfg == {"pgn": ("/models/pgn", 1)}
