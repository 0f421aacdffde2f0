"""The gRPC services: `tensorflow.serving.PredictionService` (Predict, GetModelMetadata) and
`tensorflow.serving.ModelService` (GetModelStatus), with tensorflow-serving-api's protos so the
stock client stubs work unchanged.

The handlers are registered with a request parser that never raises: bytes that are not a valid
request get INVALID_ARGUMENT from the handler (grpc's own deserializer failure would answer
INTERNAL). Every other failure goes through serving.status, so a client only ever sees a proper
status. Deadlines are honoured: `context.time_remaining()` becomes the request's deadline in the
batching queue and the run's (serving.cancel): work whose deadline passed, or whose client
cancelled, is dropped, or stopped if it is running, with DEADLINE_EXCEEDED or CANCELLED.

The handlers are synchronous (`handler(request, context)`, the context a grpc.ServicerContext or
what serving.grpc_server's workers give them); `method_table` lists them for whichever server
registers them: serving.grpc_server, which runs them on its workers, or `add_to_server`.
"""

from __future__ import annotations

import logging
import time

import grpc
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)

from pgn_tf.serving.cancel import Call
from pgn_tf.serving.metrics import Metrics
from pgn_tf.serving.models import ModelRegistry
from pgn_tf.serving.predict import Predictor
from pgn_tf.serving.status import Code, RequestError, from_exception, invalid

log = logging.getLogger("serving")


class _Malformed:
    """What the parser returns for bytes that are not the request message."""

    def __init__(self, error: str):
        self.error = error


def _parser(cls):
    def parse(data: bytes):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:  # protobuf's recursion limit too
            return _Malformed(type(e).__name__)
        return msg
    return parse


def _version_of(model_spec) -> tuple[int | None, str | None]:
    which = model_spec.WhichOneof("version_choice")
    if which == "version":
        return model_spec.version.value, None
    if which == "version_label":
        return None, model_spec.version_label
    return None, None


def _deadline(context) -> float | None:
    left = context.time_remaining()  # a huge number when the client set no deadline
    return None if left is None or left > 86400 * 365 else time.monotonic() + left


class Services:
    """Handlers of both gRPC services.

    Args:
      predictor: the Predictor; registry: the served models; metrics: Metrics or None.
    """

    def __init__(self, predictor: Predictor, registry: ModelRegistry, metrics: Metrics | None):
        self.predictor = predictor
        self.registry = registry
        self.metrics = metrics

    def _call(self, api: str, request, context, fn):
        """Runs fn(request, context, seen) -> response, turning every failure into a status and
        counting the request under the model and the version fn resolved (seen["version"])."""
        started = time.perf_counter()
        model, seen, status = "", {}, "OK"
        try:
            if isinstance(request, _Malformed):
                raise invalid(f"the request is not a valid {api} request message "
                              f"({request.error})")
            if request.model_spec.name in self.registry.models:
                model = request.model_spec.name
            return fn(request, context, seen)
        except Exception as e:  # noqa: BLE001  (every failure becomes a proper status)
            err = from_exception(e)
            if err.code == Code.INTERNAL:
                log.exception("gRPC %s failed", api)
            status = err.code.name
            context.abort(err.code, err.message)
        finally:
            if self.metrics is not None:
                self.metrics.observe_request(model, seen.get("version"), api, "grpc", status,
                                             started)

    # -- PredictionService ------------------------------------------------------------------

    def predict(self, request, context):
        return self._call("predict", request, context, self._predict)

    def _predict(self, request, context, seen):
        call = Call(_deadline(context))
        context.add_callback(call.cancel)  # the RPC ended: cancelled, expired or answered
        version, label = _version_of(request.model_spec)
        loaded = self.predictor.resolve(request.model_spec.name, version, label)
        seen["version"] = loaded.version
        sig = self.predictor.signature(loaded, request.model_spec.signature_name)
        inputs = self.predictor.inputs_from_protos(loaded, sig, dict(request.inputs))
        filt = list(request.output_filter)
        unknown = sorted(set(filt) - set(sig.outputs))
        if unknown:
            raise invalid(f"output_filter names unknown outputs {[u[:100] for u in unknown[:10]]} "
                          f"(outputs: {sorted(sig.outputs)})")
        outputs = self.predictor.predict(loaded, sig, inputs, call)
        resp = predict_pb2.PredictResponse()
        resp.model_spec.name = loaded.name
        resp.model_spec.version.value = loaded.version
        resp.model_spec.signature_name = sig.name
        for k, v in outputs.items():
            if not filt or k in filt:
                resp.outputs[k].CopyFrom(tf.make_tensor_proto(v))
        return resp

    def metadata(self, request, context):
        return self._call("metadata", request, context, self._metadata)

    def _metadata(self, request, context, seen):
        fields = list(request.metadata_field)
        if fields != ["signature_def"]:
            raise invalid(f"metadata_field must be ['signature_def'], got "
                          f"{[f[:100] for f in fields[:10]]}")
        version, label = _version_of(request.model_spec)
        loaded = self.predictor.resolve(request.model_spec.name, version, label)
        seen["version"] = loaded.version
        sigs = get_model_metadata_pb2.SignatureDefMap()
        for k, v in loaded.signature_defs.items():
            sigs.signature_def[k].CopyFrom(v)
        resp = get_model_metadata_pb2.GetModelMetadataResponse()
        resp.model_spec.name = loaded.name
        resp.model_spec.version.value = loaded.version
        resp.metadata["signature_def"].Pack(sigs)
        return resp

    # -- ModelService -----------------------------------------------------------------------

    def status(self, request, context):
        return self._call("status", request, context, self._status)

    def _status(self, request, context, seen):
        model = self.registry.model(request.model_spec.name)
        want, label = _version_of(request.model_spec)
        if label is not None:
            want = model.resolve(label=label).version
        resp = get_model_status_pb2.GetModelStatusResponse()
        states = get_model_status_pb2.ModelVersionStatus.State
        for version, state, message in model.status():
            if want is not None and version != want:
                continue
            s = resp.model_version_status.add()
            s.version = version
            s.state = states.Value(state)
            if message:
                s.status.error_code = Code.UNKNOWN.value[0]  # as TF Serving reports a failed load
                s.status.error_message = message
        if want is not None and not resp.model_version_status:
            raise RequestError(Code.NOT_FOUND, f"version {want} of model '{model.name}' is unknown")
        seen["version"] = want
        return resp


def method_table(services: Services) -> dict:
    """{service: {method: (handler(request, context), parse(bytes), serialize(response))}}:
    what both servers register, the gRPC server (serving.grpc_server, at the wire level) and
    `add_to_server` (as grpc's unary methods; the fuzz harness calls them so)."""
    def entry(fn, request_cls, response_cls):
        return fn, _parser(request_cls), response_cls.SerializeToString

    return {
        "tensorflow.serving.PredictionService": {
            "Predict": entry(services.predict, predict_pb2.PredictRequest,
                             predict_pb2.PredictResponse),
            "GetModelMetadata": entry(services.metadata,
                                      get_model_metadata_pb2.GetModelMetadataRequest,
                                      get_model_metadata_pb2.GetModelMetadataResponse),
        },
        "tensorflow.serving.ModelService": {
            "GetModelStatus": entry(services.status, get_model_status_pb2.GetModelStatusRequest,
                                    get_model_status_pb2.GetModelStatusResponse),
        },
    }


def add_to_server(services: Services, server) -> None:
    """Registers the handlers as unary methods on a synchronous grpc.Server (or anything with
    its add_generic_rpc_handlers)."""
    server.add_generic_rpc_handlers([
        grpc.method_handlers_generic_handler(service, {
            name: grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=parse, response_serializer=serialize)
            for name, (fn, parse, serialize) in table.items()})
        for service, table in method_table(services).items()])
