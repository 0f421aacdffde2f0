"""A TF Serving-compatible server over versioned SavedModels: gRPC + REST.

    python -m serving.server --model_name pgn --model_base_path BASE/pgn \
        --port 8500 --rest_api_port 8501 [--enable_batching --batching_parameters_file F]

Flags are named as tensorflow_model_server names them. gRPC services:
`tensorflow.serving.PredictionService` (Predict, GetModelMetadata) and
`tensorflow.serving.ModelService` (GetModelStatus), with the protos of tensorflow-serving-api, so
the stock client stubs work unchanged. REST: `GET /v1/models/NAME[/versions/V]`,
`GET /v1/models/NAME[/versions/V]/metadata`, `POST /v1/models/NAME[/versions/V]:predict`
(`instances` row format and `inputs` columnar format). Binds to 127.0.0.1 unless --host says
otherwise. Bad requests get INVALID_ARGUMENT / NOT_FOUND (HTTP 400 / 404) with a message; a full
batching queue RESOURCE_EXHAUSTED (HTTP 429); the server stays up.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import signal
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from serving.batching import Batcher, BatchingParameters, QueueFull, parse_batching_parameters
from serving.models import LoadedVersion, ModelRegistry, ServedModel

log = logging.getLogger("serving")

DEFAULT_SIGNATURE = "serving_default"


class RequestError(Exception):
    """A request the server refuses; code is a grpc.StatusCode."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.INTERNAL: 500,
}


class Predictor:
    """Validates a request against a signature, runs it (batched or not), returns numpy outputs."""

    def __init__(self, registry: ModelRegistry, batching: BatchingParameters | None,
                 max_request_bytes: int):
        self.registry = registry
        self.batching = batching
        self.max_request_bytes = max_request_bytes
        self._batchers: dict = {}
        self._lock = threading.Lock()

    def resolve(self, name: str, version: int | None) -> LoadedVersion:
        model = self.registry.models.get(name)
        if model is None:
            raise RequestError(grpc.StatusCode.NOT_FOUND, f"Servable not found for request: "
                               f"model '{name}' is not served (serving: "
                               f"{', '.join(sorted(self.registry.models))})")
        loaded = model.get(version)
        if loaded is None:
            what = f"version {version} of model '{name}'" if version else f"model '{name}'"
            raise RequestError(grpc.StatusCode.NOT_FOUND,
                               f"Servable not found for request: no loaded {what}")
        return loaded

    def signature(self, loaded: LoadedVersion, name: str):
        sig = loaded.signatures.get(name or DEFAULT_SIGNATURE)
        if sig is None:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Serving signature name: '{name}' not found in signature def "
                f"(available: {', '.join(sorted(loaded.signatures))})")
        return sig

    def check_inputs(self, sig, inputs: dict) -> dict:
        missing = sorted(set(sig.inputs) - set(inputs))
        extra = sorted(set(inputs) - set(sig.inputs))
        if missing or extra:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"signature '{sig.name}' takes inputs {sorted(sig.inputs)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unexpected {extra}" if extra else ""))
        out = {}
        for key, spec in sig.inputs.items():
            arr = inputs[key]
            if spec.dtype == tf.string:
                if arr.dtype.kind not in ("O", "S", "U"):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"input '{key}' must be DT_STRING, got {arr.dtype}")
                arr = np.array([x.encode("utf-8") if isinstance(x, str) else bytes(x)
                                for x in arr.reshape(-1)], dtype=object).reshape(arr.shape)
            else:
                if arr.dtype.kind not in ("i", "u", "f", "b") or (
                        spec.dtype.is_integer and arr.dtype.kind == "f"
                        and not np.all(np.mod(arr, 1) == 0)):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"input '{key}' must be {spec.dtype.name}, got {arr.dtype}")
                arr = arr.astype(spec.dtype.as_numpy_dtype)
            if spec.shape.rank is not None and arr.ndim != spec.shape.rank:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"input '{key}' must have rank {spec.shape.rank} (shape "
                                   f"{spec.shape}), got shape {list(arr.shape)}")
            if not spec.shape.is_compatible_with(arr.shape):
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"input '{key}' has shape {list(arr.shape)}, signature "
                                   f"expects {spec.shape}")
            out[key] = arr
        size = sum(sum(len(x) for x in a.reshape(-1)) if a.dtype == object else a.nbytes
                   for a in out.values())
        if size > self.max_request_bytes:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"request inputs are {size / 1e6:.1f} MB, over the server's "
                               f"--max_request_bytes={self.max_request_bytes}")
        return out

    def _run(self, sig, inputs: dict) -> dict:
        tensors = {k: tf.constant(v, dtype=sig.inputs[k].dtype) for k, v in inputs.items()}
        try:
            out = sig.fn(**tensors)
        except tf.errors.InvalidArgumentError as e:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, e.message.splitlines()[0]) from None
        return {k: v.numpy() for k, v in out.items()}

    def predict(self, name: str, version: int | None, signature_name: str, inputs: dict):
        loaded = self.resolve(name, version)
        sig = self.signature(loaded, signature_name)
        inputs = self.check_inputs(sig, inputs)
        rows = next(iter(inputs.values())).shape[0] if sig.batchable else 0
        if self.batching and sig.batchable and rows > 0:
            key = (loaded.name, loaded.version, sig.name)
            with self._lock:
                batcher = self._batchers.get(key)
                if batcher is None or batcher.run.__self__ is not loaded:
                    batcher = Batcher(_BoundRun(loaded, sig, self._run), self.batching)
                    self._batchers[key] = batcher
            try:
                return loaded, batcher.submit(inputs, timeout=600)
            except QueueFull as e:
                raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)) from None
        return loaded, self._run(sig, inputs)


class _BoundRun:
    """The callable a Batcher runs, bound to one loaded version and signature."""

    def __init__(self, loaded, sig, run):
        self.__self__ = loaded
        self.sig = sig
        self.run = run

    def __call__(self, inputs):
        return self.run(self.sig, inputs)


# -- gRPC ------------------------------------------------------------------------------------


def _abort(context, err: RequestError):
    context.abort(err.code, err.message)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, predictor: Predictor):
        self.predictor = predictor

    def Predict(self, request, context):
        try:
            inputs = {}
            for key, proto in request.inputs.items():
                try:
                    inputs[key] = tf.make_ndarray(proto)
                except Exception as e:  # a malformed TensorProto
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"input '{key}' is not a valid TensorProto: {e}") from None
            version = request.model_spec.version.value if request.model_spec.HasField("version") else None
            loaded, outputs = self.predictor.predict(
                request.model_spec.name, version, request.model_spec.signature_name, inputs)
            filt = set(request.output_filter)
            unknown = filt - set(outputs)
            if unknown:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"output_filter names unknown outputs {sorted(unknown)}")
            resp = predict_pb2.PredictResponse()
            resp.model_spec.name = loaded.name
            resp.model_spec.version.value = loaded.version
            resp.model_spec.signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
            for k, v in outputs.items():
                if not filt or k in filt:
                    resp.outputs[k].CopyFrom(tf.make_tensor_proto(v))
            return resp
        except RequestError as e:
            _abort(context, e)

    def GetModelMetadata(self, request, context):
        try:
            fields = list(request.metadata_field)
            if fields and fields != ["signature_def"]:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"metadata_field must be ['signature_def'], got {fields}")
            version = request.model_spec.version.value if request.model_spec.HasField("version") else None
            loaded = self.predictor.resolve(request.model_spec.name, version)
            sigs = get_model_metadata_pb2.SignatureDefMap()
            for k, v in loaded.signature_defs.items():
                sigs.signature_def[k].CopyFrom(v)
            resp = get_model_metadata_pb2.GetModelMetadataResponse()
            resp.model_spec.name = loaded.name
            resp.model_spec.version.value = loaded.version
            resp.metadata["signature_def"].Pack(sigs)
            return resp
        except RequestError as e:
            _abort(context, e)


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, registry: ModelRegistry):
        self.registry = registry

    def GetModelStatus(self, request, context):
        model = self.registry.models.get(request.model_spec.name)
        if model is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"model '{request.model_spec.name}' is not served")
        want = request.model_spec.version.value if request.model_spec.HasField("version") else None
        resp = get_model_status_pb2.GetModelStatusResponse()
        states = get_model_status_pb2.ModelVersionStatus.State
        for version, state, message in model.status():
            if want is not None and version != want:
                continue
            s = resp.model_version_status.add()
            s.version = version
            s.state = states.Value(state)
            if message:
                s.status.error_code = 13  # INTERNAL, as TF Serving reports a failed load
                s.status.error_message = message
        if want is not None and not resp.model_version_status:
            context.abort(grpc.StatusCode.NOT_FOUND, f"version {want} of model '{model.name}' is unknown")
        return resp


# -- REST ------------------------------------------------------------------------------------


def _json_value(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray):
        return [_json_value(x) for x in v] if v.ndim else _json_value(v.item())
    if isinstance(v, np.generic):
        return v.item()
    return v


def _from_json(value):
    """JSON values -> numpy, honouring TF Serving's {"b64": ...} for binary strings."""
    def conv(x):
        if isinstance(x, dict):
            if set(x) == {"b64"}:
                return base64.b64decode(x["b64"])
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "objects other than {\"b64\": ...} "
                               "are not tensor values")
        if isinstance(x, list):
            return [conv(y) for y in x]
        return x
    value = conv(value)
    try:
        arr = np.array(value)
    except ValueError as e:
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"ragged or mixed tensor: {e}") from None
    if arr.dtype.kind in ("U", "S"):
        arr = arr.astype(object)
    if arr.dtype == object and any(not isinstance(x, (str, bytes)) for x in arr.reshape(-1)):
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "ragged or mixed-type tensor")
    return arr


def make_rest_handler(predictor: Predictor, registry: ModelRegistry, max_body: int):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # route to logging, not stderr spam
            log.debug("rest %s", fmt % args)

        def _send(self, code: int, payload: dict):
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, err: RequestError):
            self._send(HTTP_STATUS.get(err.code, 500), {"error": err.message})

        def _parse_path(self, method: str):
            path = self.path.split("?")[0]
            if not path.startswith("/v1/models/"):
                raise RequestError(grpc.StatusCode.NOT_FOUND, f"unknown path {path}")
            rest = path[len("/v1/models/"):]
            verb = None
            if ":" in rest:
                rest, verb = rest.rsplit(":", 1)
            parts = rest.split("/")
            name, version, tail = parts[0], None, parts[1:]
            if len(tail) >= 2 and tail[0] == "versions":
                if not tail[1].isdigit():
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"bad version '{tail[1]}'")
                version, tail = int(tail[1]), tail[2:]
            return name, version, tail, verb

        def do_GET(self):
            try:
                name, version, tail, verb = self._parse_path("GET")
                if verb:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f":{verb} needs POST")
                if tail == ["metadata"]:
                    loaded = predictor.resolve(name, version)
                    from google.protobuf import json_format

                    sigs = {k: json_format.MessageToDict(v) for k, v in loaded.signature_defs.items()}
                    self._send(200, {"model_spec": {"name": name, "signature_name": "",
                                                    "version": str(loaded.version)},
                                     "metadata": {"signature_def": {"signature_def": sigs}}})
                    return
                if tail:
                    raise RequestError(grpc.StatusCode.NOT_FOUND, f"unknown path {self.path}")
                model = registry.models.get(name)
                if model is None:
                    raise RequestError(grpc.StatusCode.NOT_FOUND, f"model '{name}' is not served")
                statuses = [{"version": str(v), "state": s,
                             "status": {"error_code": "UNKNOWN" if m else "OK", "error_message": m}}
                            for v, s, m in model.status() if version is None or v == version]
                if not statuses:
                    raise RequestError(grpc.StatusCode.NOT_FOUND, f"no version {version} of '{name}'")
                self._send(200, {"model_version_status": statuses})
            except RequestError as e:
                self._error(e)

        def do_POST(self):
            try:
                name, version, tail, verb = self._parse_path("POST")
                if verb != "predict" or tail:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"unsupported POST {self.path} (use :predict)")
                length = int(self.headers.get("Content-Length") or 0)
                if length > max_body:
                    self.rfile.read(length)
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"request body of {length / 1e6:.1f} MB is over the limit")
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"request body is not valid UTF-8 JSON: {e}") from None
                if not isinstance(body, dict):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "request body must be an object")
                sig_name = body.get("signature_name") or DEFAULT_SIGNATURE
                if not isinstance(sig_name, str):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "signature_name must be a string")
                loaded = predictor.resolve(name, version)
                sig = predictor.signature(loaded, sig_name)
                if ("instances" in body) == ("inputs" in body):
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                       "request needs exactly one of 'instances' or 'inputs'")
                single = len(sig.inputs) == 1
                only = next(iter(sig.inputs))
                if "instances" in body:
                    inst = body["instances"]
                    if not isinstance(inst, list):
                        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "'instances' must be a list")
                    if single and not (inst and isinstance(inst[0], dict)):
                        inputs = {only: _from_json(inst)}
                    else:
                        if not all(isinstance(x, dict) for x in inst):
                            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                               "each instance must be an object of named inputs")
                        keys = set().union(*(x.keys() for x in inst)) if inst else set()
                        inputs = {k: _from_json([x.get(k) for x in inst]) for k in keys}
                else:
                    raw_inputs = body["inputs"]
                    if isinstance(raw_inputs, dict):
                        inputs = {k: _from_json(v) for k, v in raw_inputs.items()}
                    elif single:
                        inputs = {only: _from_json(raw_inputs)}
                    else:
                        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                           "'inputs' must name each input of this signature")
                loaded, outputs = predictor.predict(name, loaded.version, sig_name, inputs)
                if "instances" in body:
                    names = list(outputs)
                    n = len(next(iter(outputs.values())))
                    if len(names) == 1:
                        preds = [_json_value(outputs[names[0]][i]) for i in range(n)]
                    else:
                        preds = [{k: _json_value(outputs[k][i]) for k in names} for i in range(n)]
                    self._send(200, {"predictions": preds})
                else:
                    outs = {k: _json_value(v) for k, v in outputs.items()}
                    self._send(200, {"outputs": outs if len(outs) > 1 else next(iter(outs.values()))})
            except RequestError as e:
                self._error(e)
            except Exception as e:  # never let one request take the server down
                log.exception("REST request failed")
                self._send(500, {"error": f"internal error: {type(e).__name__}"})

    return Handler


# -- main ------------------------------------------------------------------------------------


def read_model_config(path: str) -> dict[str, tuple[str, int]]:
    cfg = model_server_config_pb2.ModelServerConfig()
    with open(path) as f:
        try:
            text_format.Parse(f.read(), cfg)
        except text_format.ParseError as e:
            raise ValueError(f"bad --model_config_file {path}: {e}") from None
    out = {}
    for m in cfg.model_config_list.config:
        policy = m.model_version_policy
        n = policy.latest.num_versions if policy.HasField("latest") else 1
        out[m.name] = (m.base_path, n or 1)
    if not out:
        raise ValueError(f"--model_config_file {path} lists no model")
    return out


class Server:
    """The running servers; `stop()` shuts them down. Used by main() and by tests."""

    def __init__(self, models: dict[str, tuple[str, int]], host: str = "127.0.0.1",
                 port: int = 8500, rest_port: int = 0, batching: BatchingParameters | None = None,
                 poll_seconds: float = 1.0, max_request_bytes: int = 10 * 2**20,
                 grpc_workers: int = 32):
        self.registry = ModelRegistry(
            {name: ServedModel(name, base, n) for name, (base, n) in models.items()}, poll_seconds)
        self.registry.start()
        self.predictor = Predictor(self.registry, batching, max_request_bytes)
        # gRPC accepts messages well over max_request_bytes, so an oversized article gets our
        # INVALID_ARGUMENT with a reason rather than a transport error.
        limit = max(4 * max_request_bytes, 64 * 2**20)
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=grpc_workers),
            options=[("grpc.max_receive_message_length", limit),
                     ("grpc.max_send_message_length", limit)])
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionServicer(self.predictor), self.grpc)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(self.registry), self.grpc)
        self.port = self.grpc.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise ValueError(f"cannot bind gRPC to {host}:{port}")
        self.grpc.start()
        self.http = None
        self.rest_port = None
        if rest_port is not None:  # 0 picks a free port
            self.http = ThreadingHTTPServer(
                (host, rest_port), make_rest_handler(self.predictor, self.registry, limit))
            self.http.daemon_threads = True
            self.rest_port = self.http.server_address[1]
            threading.Thread(target=self.http.serve_forever, daemon=True, name="rest").start()

    def stop(self) -> None:
        self.registry.stop()
        if self.http:
            self.http.shutdown()
        self.grpc.stop(grace=2).wait()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m serving.server", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free port)")
    p.add_argument("--rest_api_port", type=int, default=8501, help="REST port (-1: no REST)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    p.add_argument("--model_name", default="default")
    p.add_argument("--model_base_path")
    p.add_argument("--model_config_file")
    p.add_argument("--enable_batching", action="store_true")
    p.add_argument("--batching_parameters_file")
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0)
    p.add_argument("--num_versions", type=int, default=1,
                   help="how many of the highest versions stay loaded (model_spec.version picks one)")
    p.add_argument("--max_request_bytes", type=int, default=10 * 2**20)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        if args.model_config_file:
            models = read_model_config(args.model_config_file)
        elif args.model_base_path:
            models = {args.model_name: (args.model_base_path, args.num_versions)}
        else:
            raise ValueError("give --model_base_path (with --model_name) or --model_config_file")
        batching = None
        if args.enable_batching:
            batching = BatchingParameters()
            if args.batching_parameters_file:
                with open(args.batching_parameters_file) as f:
                    batching = parse_batching_parameters(f.read())
        server = Server(models, args.host, args.port,
                        args.rest_api_port if args.rest_api_port >= 0 else None, batching,
                        args.file_system_poll_wait_seconds, args.max_request_bytes)
    except (ValueError, OSError) as e:
        print(f"serving.server: error: {e}", file=sys.stderr)
        return 2
    for name, m in server.registry.models.items():
        if m.get() is None:
            log.warning("model %s: no loadable version under %s yet; polling", name, m.base_path)
    rest = f", REST on {args.host}:{server.rest_port}" if server.rest_port else ""
    log.info("serving %s: gRPC on %s:%d%s", ", ".join(server.registry.models), args.host,
             server.port, rest)
    print(f"READY grpc={server.port} rest={server.rest_port or ''}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
