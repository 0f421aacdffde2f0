"""serving.server with the stock tensorflow-serving-api stubs and REST, in-process on loopback,
over the real exported summarizer."""

import os

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
)

from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.serving import client
from pgn_tf.serving.models import ModelSpec
from pgn_tf.serving.server import build_parser, main, options_from_args
from pgn_tf.serving.service import ServerOptions, as_model_spec, read_model_config
from tests.serving.helpers import ARTICLE, METRICS_PATH, request, rest, stub, summaries

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_grpc_and_rest_answer_like_summarize(server, trained_model_dir):
    want = Summarizer.from_model_dir(trained_model_dir).summarize(
        tf.constant([ARTICLE]))["summaries"].numpy()[0].decode()
    assert client.summarize(f"127.0.0.1:{server.port}", "pgn", [ARTICLE]) == [want]
    assert client.summarize_rest(f"127.0.0.1:{server.rest_port}", "pgn", [ARTICLE]) == [want]
    code, body = rest(server.rest_port, "/v1/models/pgn/versions/1:predict",
                      {"inputs": {"articles": [ARTICLE]}})
    assert code == 200 and body["outputs"]["summaries"] == [want]
    code, body = rest(server.rest_port, "/v1/models/pgn:predict",
                      {"instances": [{"b64": "eg=="}, ARTICLE]})  # b64 "z"
    assert code == 200 and len(body["predictions"]) == 2
    resp = stub(server).Predict(request({"articles": [ARTICLE]}, version=1))
    assert resp.model_spec.version.value == 1 and summaries(resp) == [want]


def test_metadata_and_status(server):
    meta_req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    meta_req.model_spec.name = "pgn"
    meta = stub(server).GetModelMetadata(meta_req)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    meta.metadata["signature_def"].Unpack(sigs)
    assert {"serving_default", "summarize_verbose", "summarize_options"} <= set(sigs.signature_def)
    assert set(sigs.signature_def["serving_default"].inputs) == {"articles"}
    st_req = get_model_status_pb2.GetModelStatusRequest()
    st_req.model_spec.name = "pgn"
    st = model_service_pb2_grpc.ModelServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{server.port}")).GetModelStatus(st_req)
    assert [(s.version, s.state) for s in st.model_version_status] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
    assert rest(server.rest_port, "/v1/models/pgn")[1]["model_version_status"][0]["state"] \
        == "AVAILABLE"
    code, body = rest(server.rest_port, "/v1/models/pgn/metadata")
    assert code == 200 and "serving_default" in body["metadata"]["signature_def"]["signature_def"]


OPTIONS = "summarize_options"


def options(beam, max_steps, min_steps):
    return {"articles": [ARTICLE], "beam_size": tf.make_tensor_proto(beam, tf.int32),
            "max_decode_steps": tf.make_tensor_proto(max_steps, tf.int32),
            "min_decode_steps": tf.make_tensor_proto(min_steps, tf.int32)}


@pytest.mark.parametrize("inputs, kw, code, message", [
    ({"text": [ARTICLE]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "missing ['articles']"),
    ({"articles": [1, 2]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "must be DT_STRING"),
    ({"articles": [[ARTICLE]]}, {}, grpc.StatusCode.INVALID_ARGUMENT, "rank 1"),
    ({"articles": ARTICLE}, {}, grpc.StatusCode.INVALID_ARGUMENT, "rank 1"),
    ({"articles": [ARTICLE]}, {"signature": "nope"}, grpc.StatusCode.INVALID_ARGUMENT, "not found"),
    ({"articles": [ARTICLE]}, {"name": "nope"}, grpc.StatusCode.NOT_FOUND, "not served"),
    ({"articles": [ARTICLE]}, {"version": 7}, grpc.StatusCode.NOT_FOUND, "version 7"),
    ({"articles": [ARTICLE]}, {"label": "stable"}, grpc.StatusCode.NOT_FOUND, "no version label"),
    ({"articles": ["x" * (10 * 2**20 + 1)]}, {}, grpc.StatusCode.INVALID_ARGUMENT,
     "max_request_bytes"),
    ({"articles": ["x" * 11_000_000]}, {}, grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
    ({"articles": ["a"] * 257}, {}, grpc.StatusCode.INVALID_ARGUMENT, "--max_batch_rows=256"),
    (options(40, 5, 0), {"signature": OPTIONS}, grpc.StatusCode.INVALID_ARGUMENT,
     "beam_size must be between 1 and 16, got 40"),
    (options(2, 10**6, 0), {"signature": OPTIONS}, grpc.StatusCode.INVALID_ARGUMENT,
     "max_decode_steps must be between 1 and 400"),
    (options(2, 5, -1), {"signature": OPTIONS}, grpc.StatusCode.INVALID_ARGUMENT,
     "min_decode_steps must be between 0 and 400"),
])
def test_bad_grpc_requests(server, inputs, kw, code, message):
    with pytest.raises(grpc.RpcError) as e:
        stub(server).Predict(request(inputs, **kw), timeout=60)
    assert e.value.code() == code and message in e.value.details(), e.value.details()


def test_the_graph_checks_option_caps_itself(server):
    """With the server's up-front check taken away, the export's in-graph assertion answers:
    still INVALID_ARGUMENT with the same message, not INTERNAL."""
    loaded = server.registry.models["pgn"].get()
    saved, loaded.input_limits = loaded.input_limits, {}
    try:
        for bad, message in [(options(0, 5, 0), "beam_size must be between 1 and 16, got 0"),
                             (options(2, 3, 9), "min_decode_steps must be at most "
                                                "max_decode_steps, got 9 and 3")]:
            with pytest.raises(grpc.RpcError) as e:
                stub(server).Predict(request(bad, signature=OPTIONS), timeout=60)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert e.value.details() == message
        ok = stub(server).Predict(request(options(2, 3, 0), signature=OPTIONS), timeout=60)
        assert len(summaries(ok)[0].split()) <= 3
    finally:
        loaded.input_limits = saved


def test_non_utf8_article_is_summarized_as_in_process(server, trained_model_dir):
    """Bytes that are not UTF-8 are summarized as the in-process summarizer summarizes them, and
    the answer is valid UTF-8 (summaries() decodes it strictly)."""
    raw = b"\xff\xfe caf\xc3 broken " + ARTICLE.encode()
    want = Summarizer.from_model_dir(trained_model_dir).summarize(
        tf.constant([raw]))["summaries"].numpy()[0].decode()
    resp = stub(server).Predict(request({"articles": [raw]}))
    assert summaries(resp) == [want] and want


@pytest.mark.parametrize("path, raw, code, message", [
    ("/v1/models/pgn:predict", b"{not json", 400, "not valid UTF-8 JSON"),
    ("/v1/models/pgn:predict", b'{"instances": ["\xff\xfe"]}', 400, "not valid UTF-8"),
    ("/v1/models/pgn:predict", b'{"instances": [1, 2]}', 400, "must be strings"),
    ("/v1/models/pgn:predict", b'{"instances": [["a"], "b"]}', 400, "must have rank 1"),
    ("/v1/models/pgn:predict", b'{"instances": [{"b64": "@@"}]}', 400, "not valid base64"),
    ("/v1/models/pgn:predict", b"[" * 50_000 + b"]" * 50_000, 400, "nested too deeply"),
    ("/v1/models/pgn:predict", b'{"signature_name": "x", "instances": ["a"]}', 400, "not found"),
    ("/v1/models/pgn:predict", b'{"instances": ["a"], "inputs": ["a"]}', 400, "exactly one"),
    ("/v1/models/pgn:predict", b'{"signature_name": "summarize_options", "inputs": {"articles": '
                               b'["a"], "beam_size": 1e300, "max_decode_steps": 3, '
                               b'"min_decode_steps": 0}}', 400, "int32"),
    ("/v1/models/pgn:classify", b'{"instances": ["a"]}', 400, "not supported"),
    ("/v1/models/nope:predict", b'{"instances": ["a"]}', 404, "not served"),
    ("/v1/models/pgn/versions/9:predict", b'{"instances": ["a"]}', 404, "version 9"),
    ("/v1/models/pgn/labels/canary:predict", b'{"instances": ["a"]}', 404, "no version label"),
    ("/v2/whatever", b"{}", 404, "unknown path"),
])
def test_bad_rest_requests(server, path, raw, code, message):
    got, body = rest(server.rest_port, path, raw=raw)
    assert got == code and message in body["error"], body


def test_metrics_count_requests_per_model_and_version(server):
    before = rest(server.rest_port, METRICS_PATH)[1]
    client.summarize(f"127.0.0.1:{server.port}", "pgn", [ARTICLE, ARTICLE])
    rest(server.rest_port, "/v1/models/pgn:predict", raw=b'{"instances": [1]}')
    code, text = rest(server.rest_port, METRICS_PATH)
    assert code == 200

    def value(text, prefix):
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(prefix))

    ok = (':tensorflow:serving:request_count_total{api="predict",model_name="pgn",'
          'protocol="grpc",status="OK",version="1"}')
    bad = (':tensorflow:serving:request_count_total{api="predict",model_name="pgn",'
           'protocol="rest",status="INVALID_ARGUMENT",version="1"}')
    assert value(text, ok) == value(before, ok) + 1
    assert value(text, bad) == value(before, bad) + 1
    rows = (':tensorflow:serving:batch_size_sum{model_name="pgn",signature="serving_default",'
            'version="1"}')
    assert value(text, rows) == value(before, rows) + 2
    assert ':tensorflow:serving:request_latency_seconds_bucket{api="predict"' in text


def test_rest_port_zero_disables_rest_as_in_tf_serving(tmp_path):
    args = build_parser().parse_args(["--model_base_path", str(tmp_path), "--port", "0"])
    _, opts = options_from_args(args)
    assert opts.rest_port == 0
    args = build_parser().parse_args(["--model_base_path", str(tmp_path), "--rest_api_port",
                                      "auto", "--enable_batching=false"])
    _, opts = options_from_args(args)
    assert opts.rest_port == "auto" and opts.batching is None
    with pytest.raises(ValueError, match="must differ from --port"):
        ServerOptions(port=8500, rest_port=8500).validate()


def test_cli_refuses_bad_configs_with_one_line(tmp_path, capsys):
    """(The CLI serving requests is tested by test_hostile_clients.py, in a child process.)"""
    bad = tmp_path / "batching.config"
    bad.write_text("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\n")
    assert main(["--model_base_path", str(tmp_path), "--port", "0", "--enable_batching",
                 "--batching_parameters_file", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the last of allowed_batch_sizes must equal" in err[0]
    mon = os.path.join(ROOT, "serving", "monitoring.config")
    args = build_parser().parse_args(["--model_base_path", str(tmp_path), "--port", "0",
                                      "--monitoring_config_file", mon])
    with pytest.raises(ValueError, match="give --rest_api_port"):
        options_from_args(args)
    args = build_parser().parse_args(["--model_base_path", str(tmp_path), "--rest_api_port",
                                      "auto", "--monitoring_config_file", mon])
    assert options_from_args(args)[1].metrics_path == METRICS_PATH


def test_model_config_file(tmp_path):
    assert as_model_spec(("/m", 2)) == ModelSpec("/m", "latest", num_versions=2)
    assert as_model_spec("/m") == ModelSpec("/m")
    cfg = read_model_config(os.path.join(ROOT, "serving", "models.config"))
    assert cfg["pgn"].base_path == "/models/pgn" and cfg["pgn"].policy == "latest"
    path = tmp_path / "models.config"
    path.write_text("""model_config_list {
      config { name: "a" base_path: "/m/a" model_platform: "tensorflow"
               model_version_policy { specific { versions: 3 versions: 5 } }
               version_labels { key: "stable" value: 3 } version_labels { key: "canary" value: 5 } }
      config { name: "b" base_path: "/m/b" model_version_policy { all {} } }
    }""")
    cfg = read_model_config(str(path))
    assert cfg["a"].policy == "specific" and cfg["a"].versions == (3, 5)
    assert cfg["a"].labels == {"stable": 3, "canary": 5} and cfg["b"].policy == "all"
    for text, message in [
        ('config { name: "a" base_path: "/m" model_platform: "pytorch" }', "not supported"),
        ('config { name: "a" base_path: "/m" model_version_policy { specific { versions: 2 } } '
         'version_labels { key: "x" value: 4 } }', "does not load"),
        ('config { name: "a" base_path: "/m" } config { name: "a" base_path: "/n" }', "twice"),
    ]:
        path.write_text(f"model_config_list {{ {text} }}")
        with pytest.raises(ValueError, match=message):
            read_model_config(str(path))
