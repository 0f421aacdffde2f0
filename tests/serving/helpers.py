"""Helpers of the serving tests: a tiny real SavedModel for version-lifecycle tests (it loads in
a fraction of a second), publishing versions, and small gRPC / REST / raw-HTTP clients."""

import contextlib
import json
import os
import shutil
import socket
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

ARTICLE = ("zorblax , a pilot from quenton , sold 5512 boxes of apples on friday . "
           "officials said zorblax sold 5512 boxes of apples .")
METRICS_PATH = "/monitoring/prometheus/metrics"


class TinyModel(tf.Module):
    """A real SavedModel with the summarizer's interface: summaries = articles, scores = the
    sum of a `payload_mb` MB weight (so a version left in memory shows in RSS)."""

    def __init__(self, payload_mb: float = 0.0, tag: str = ""):
        super().__init__()
        n = max(1, int(payload_mb * 2**20 / 4))
        self.weight = tf.Variable(tf.random.stateless_uniform([n], seed=[1, 2]))
        self.tag = tf.constant(tag)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles")])
    def serve(self, articles):
        score = tf.reduce_sum(self.weight) * 0.0 + tf.cast(tf.strings.length(articles), tf.float32)
        return {"summaries": tf.strings.join([articles, self.tag]), "scores": score}


def write_tiny_model(path: str, payload_mb: float = 0.0, tag: str = "") -> str:
    m = TinyModel(payload_mb, tag)
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


def add_version(base, version, src) -> str:
    """Publishes `src` as BASE/VERSION the way pgn_tf.export does: a temp name, then a rename."""
    os.makedirs(base, exist_ok=True)
    tmp = os.path.join(base, f".tmp-{version}")
    shutil.copytree(src, tmp)
    final = os.path.join(base, str(version))
    os.rename(tmp, final)
    return final


def stub(srv):
    return prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{srv.port}",
                              options=[("grpc.max_send_message_length", 256 * 2**20)]))


def request(inputs, name="pgn", signature="", version=None, label=None):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    req.model_spec.signature_name = signature
    if version is not None:
        req.model_spec.version.value = version
    if label is not None:
        req.model_spec.version_label = label
    for k, v in inputs.items():
        req.inputs[k].CopyFrom(v if isinstance(v, tensor_pb2.TensorProto)
                               else tf.make_tensor_proto(v))
    return req


def rest(port, path, body=None, raw=None, method=None):
    """(HTTP status, decoded JSON body or text) of one REST call."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            code, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read()
    try:
        return code, json.loads(text)
    except ValueError:
        return code, text.decode("utf-8", "replace")


def raw_http(port, data: bytes, timeout=10.0, shutdown=False) -> int | None:
    """Sends raw bytes on a new connection; the response's status code, or None when the server
    closed the connection without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if shutdown:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before reading everything
            pass
        buf = b""
        try:
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        except ConnectionResetError:
            pass
    if not buf.startswith(b"HTTP/1."):
        return None
    return int(buf.split(b" ", 2)[1])


def summaries(resp) -> list:
    return [s.decode() for s in np.atleast_1d(tf.make_ndarray(resp.outputs["summaries"]))]


class SpinModel(tf.Module):
    """A real SavedModel whose run takes as long as asked: `steps` iterations of a
    tf.while_loop (the longest of the batch's rows), as a beam search's loop would. 2**31 - 1
    steps run for hours unless the server stops the run."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles"),
                                  tf.TensorSpec([None], tf.int32, name="steps")])
    def serve(self, articles, steps):
        def body(i, x):
            return i + 1, tf.tanh(tf.matmul(x, x) * 0.5)

        _, x = tf.while_loop(lambda i, x: i < tf.reduce_max(steps), body,
                             [tf.constant(0), tf.eye(16)])
        return {"summaries": articles,
                "scores": tf.fill(tf.shape(articles), tf.reduce_sum(x))}


def write_spin_model(path: str) -> str:
    m = SpinModel()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


def wait_until(predicate, seconds=30.0):
    """Polls predicate() until it is true or `seconds` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


@contextlib.contextmanager
def batching_server(exported, extra_args=()):
    """The test export served by a server process of its own (its memory is its own) with the
    shipped serving/batching.config: yields (process, gRPC port, REST port)."""
    from pgn_tf.serving.process import start_server, stop_server

    base, name, _ = exported
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc, grpc_port, rest_port = start_server(
        os.path.join(base, name), name,
        ["--enable_batching", "--batching_parameters_file",
         os.path.join(root, "serving", "batching.config"), *extra_args])
    try:
        yield proc, grpc_port, rest_port
    finally:
        stop_server(proc)
