"""What one fuzz input runs through, in the campaign's child process (serving.fuzz says what a
campaign is and what counts as a finding): the targets' method tables, the stand-in export, the
seed corpus, and `Harness`, which feeds an input to the server's own gRPC handlers or REST app
and classifies the answer; `instrument` puts atheris' coverage on the serving modules.

Importing this module needs no atheris.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import gzip
import io
import json
import os
import resource
import types

import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)

from pgn_tf import config as config_lib
from pgn_tf.saved_model import export as export_lib
from pgn_tf.saved_model.contract import (
    ARTICLES,
    BEAM_SIZE,
    MAX_DECODE_STEPS,
    MIN_DECODE_STEPS,
    SUMMARIZE_OPTIONS,
    SUMMARIZE_VERBOSE,
)
from pgn_tf.utils import procfs
from tools.fuzz.fuzz_mutators import Method, split_input

MODEL_NAME = "pgn"
MODEL_VERSION = 1
LABEL = "stable"  # a version label of the stand-in model, pointing to MODEL_VERSION

GRPC_METHODS = (
    Method("grpc", "Predict", "/tensorflow.serving.PredictionService/Predict",
           predict_pb2.PredictRequest),
    Method("grpc", "GetModelMetadata", "/tensorflow.serving.PredictionService/GetModelMetadata",
           get_model_metadata_pb2.GetModelMetadataRequest),
    Method("grpc", "GetModelStatus", "/tensorflow.serving.ModelService/GetModelStatus",
           get_model_status_pb2.GetModelStatusRequest),
    Method("grpc", "Classify", "/tensorflow.serving.PredictionService/Classify",
           classification_pb2.ClassificationRequest),
)
REST_METHODS = (
    Method("rest", "predict", f"/v1/models/{MODEL_NAME}:predict"),
    Method("rest", "versions/1:predict",
           f"/v1/models/{MODEL_NAME}/versions/{MODEL_VERSION}:predict"),
    Method("rest", "labels:predict", f"/v1/models/{MODEL_NAME}/labels/{LABEL}:predict"),
    Method("rest", "gzip:predict", f"/v1/models/{MODEL_NAME}:predict", encoding="gzip"),
)
TARGETS = {"grpc": GRPC_METHODS, "rest": REST_METHODS, "all": GRPC_METHODS + REST_METHODS}
# The campaigns through a running server (serving.fuzz_loopback): the REST transport's bytes
# (serving.fuzz_http), the gRPC transport's HTTP/2 streams (serving.fuzz_grpc_wire), and the
# real model behind both (serving.fuzz_model).
TRANSPORT_CAMPAIGNS = ("http", "grpc_wire", "model")
CAMPAIGNS = (*TARGETS, *TRANSPORT_CAMPAIGNS)
CLIENT_CODES = ("INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "FAILED_PRECONDITION",
                "RESOURCE_EXHAUSTED", "UNIMPLEMENTED")
TEXTS = tuple(export_lib.CHECK_ARTICLES)  # articles the mutators put in JSON bodies
# What one input may add to the process' peak RSS: requests are bounded by --max_request_bytes
# (10 MiB; a REST body by twice that and --rest_api_max_json_values), so well under this.
MAX_GROWTH_MB = 256


# -- the stand-in export ---------------------------------------------------------------------


class StandInSummarizer(tf.Module):
    """What pgn_tf.saved_model.export.build_archive needs of a Summarizer (`cfg`, `model`,
    `table`, `summarize`), echoing instead of decoding: summaries are the articles' first 64 bytes,
    scores their lengths over max_steps, one token a row. The archive around it is the real
    export's: the same signatures, input specs, range assertions and serving contract (the
    default Config's decoding defaults)."""

    def __init__(self):
        super().__init__()
        self.cfg = config_lib.Config()
        self.model = tf.Module()
        self.model.weight = tf.Variable(1.0)
        self.table = tf.Module()
        self.table.weight = tf.Variable(0.0)

    def summarize(self, articles, request=None) -> dict:
        """request: a pgn_tf.decoding.search.DecodeRequest (its beam size and step limits)."""
        dc = self.cfg.decode
        articles = tf.reshape(tf.convert_to_tensor(articles, tf.string), [-1])  # [B]
        beam_size, max_steps, min_steps = ((request.beam_size, request.max_steps,
                                            request.min_steps) if request else (None,) * 3)
        beam = tf.cast(dc.beam_size if beam_size is None else beam_size, tf.float32)
        steps = tf.cast(dc.max_dec_steps if max_steps is None else max_steps, tf.float32)
        low = tf.cast(dc.min_dec_steps if min_steps is None else min_steps, tf.float32)
        summaries = tf.strings.substr(articles, 0, 64)  # [B]
        length = tf.cast(tf.strings.length(articles), tf.float32)  # [B]
        scores = -length / tf.maximum(steps, 1.0) * self.model.weight + 0.0 * (beam + low)
        tokens = summaries[:, None]  # [B, 1]
        b = tf.shape(articles)[0]
        return {"summaries": summaries, "scores": scores, "tokens": tokens,
                "attention": tf.zeros([b, 1, 1]), "p_gen": tf.zeros([b, 1]),
                "raw_summaries": summaries, "raw_tokens": tokens}


def write_stand_in_export(base: str) -> str:
    """BASE/pgn/1: the export's archive (pgn_tf.saved_model.export) around a
    StandInSummarizer, with its warm-up file."""
    summarizer = StandInSummarizer()
    limits = export_lib.option_limits(summarizer.cfg)
    path = os.path.join(base, MODEL_NAME, str(MODEL_VERSION))
    export_lib.write_servable(path, summarizer, limits, MODEL_NAME)
    return path


# -- the seed corpus -------------------------------------------------------------------------


def grpc_seeds(version_dir: str) -> list:
    """Valid requests of each gRPC method: the export's warm-up requests (one a signature) and
    variants (rows, a version, a label, int32 scalars in tensor_content, an output_filter)."""
    from pgn_tf.serving import warmup

    seeds = list(warmup.read_requests(version_dir))
    articles = [a.encode() for a in TEXTS]
    rows = predict_pb2.PredictRequest(output_filter=["summaries"])
    rows.model_spec.name = MODEL_NAME
    rows.model_spec.version.value = MODEL_VERSION
    rows.inputs[ARTICLES].CopyFrom(tf.make_tensor_proto(articles))
    options = predict_pb2.PredictRequest()
    options.model_spec.name = MODEL_NAME
    options.model_spec.version_label = LABEL
    options.model_spec.signature_name = SUMMARIZE_OPTIONS
    options.inputs[ARTICLES].CopyFrom(tf.make_tensor_proto(articles[:1]))
    for k, v in ((BEAM_SIZE, 2), (MAX_DECODE_STEPS, 30), (MIN_DECODE_STEPS, 0)):
        t = options.inputs[k]
        t.dtype = tf.int32.as_datatype_enum
        t.tensor_content = v.to_bytes(4, "little")
    meta = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    meta.model_spec.name = MODEL_NAME
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = MODEL_NAME
    status.model_spec.version.value = MODEL_VERSION
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = MODEL_NAME
    return seeds + [rows, options, meta, status, classify]


def rest_seeds() -> list:
    """Valid REST bodies: row and columnar, plain and {"b64": ...} strings, each signature."""
    a, b = TEXTS[0], TEXTS[2]
    b64 = base64.b64encode(b.encode()).decode()
    options = {ARTICLES: [a], BEAM_SIZE: 2, MAX_DECODE_STEPS: 30, MIN_DECODE_STEPS: 0}
    return [
        {"instances": [a, b]},
        {"instances": [{"b64": b64}]},
        {"instances": [{ARTICLES: a}, {ARTICLES: {"b64": b64}}]},
        {"inputs": [a]},
        {"inputs": {ARTICLES: [a, b]}},
        {"inputs": [{"b64": b64}]},
        {"signature_name": SUMMARIZE_VERBOSE, "instances": [a]},
        {"signature_name": SUMMARIZE_OPTIONS, "inputs": options},
    ]


def seed_corpus(methods: tuple, version_dir: str) -> list[bytes]:
    """Fuzz inputs (method byte + payload) of valid requests for each method of `methods`."""
    payloads = collections.defaultdict(list)
    for msg in grpc_seeds(version_dir):
        payloads[type(msg)].append(msg.SerializeToString())
    out = []
    for i, m in enumerate(methods):
        if m.kind == "grpc":
            out += [bytes([i]) + p for p in payloads[m.request]]
        else:
            bodies = [json.dumps(body).encode() for body in rest_seeds()]
            if m.encoding == "gzip":
                bodies = [gzip.compress(b, mtime=0) for b in bodies]
            out += [bytes([i]) + b for b in bodies]
    return out


# -- the harness -----------------------------------------------------------------------------


class Finding(Exception):
    """A request the server answered as it must not (the module docstring's outcomes)."""


class _Aborted(Exception):
    """What the harness' context.abort raises (grpc's raises an exception too)."""

    def __init__(self, code, details):
        super().__init__(code, details)
        self.code = code
        self.details = details


class _Context:
    """What the gRPC handlers use of a grpc.ServicerContext; no deadline."""

    def __init__(self):
        self.callbacks = []

    def time_remaining(self):
        return None

    def add_callback(self, callback) -> bool:
        self.callbacks.append(callback)
        return True

    def abort(self, code, details):
        raise _Aborted(code, details)


class _Registrar:
    """Takes the handlers grpc_service.add_to_server registers on a grpc.Server."""

    def __init__(self):
        self.handlers = []

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.handlers.extend(handlers)


@dataclasses.dataclass(frozen=True)
class _CallDetails:  # grpc.HandlerCallDetails
    method: str
    invocation_metadata: tuple = ()


def _peak_kib() -> int:
    """The process' RSS high-water mark (VmHWM, which procfs.reset_peak resets), read with one
    system call rather than by parsing /proc/self/status."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Harness:
    """The server's gRPC handlers and REST application over the stand-in export in
    `base/pgn/1`, with ServerOptions' default limits; `one(data)` answers one fuzz input.

    Args:
      base: the model base dir (write_stand_in_export's); methods: a target's table;
      max_growth_mb: how much one input may raise the process' peak RSS (the server's
        requests are bounded by --max_request_bytes, 10 MiB, and its JSON value cap).
    """

    def __init__(self, base: str, methods: tuple, max_growth_mb: float = MAX_GROWTH_MB):
        from pgn_tf.serving import grpc_service, rest_service, validation, warmup
        from pgn_tf.serving.cancel import Watchdog
        from pgn_tf.serving.metrics import Metrics
        from pgn_tf.serving.models import ModelRegistry, ModelSpec, ServedModel
        from pgn_tf.serving.predict import Predictor
        from pgn_tf.serving.service import ServerOptions
        from pgn_tf.serving.status import HTTP_STATUS, MAX_MESSAGE_CHARS, Code

        self.base = base
        self.methods = methods
        self.max_growth_mb = max_growth_mb
        opts = ServerOptions()  # the server's defaults, as serving.service.Server uses them
        model = ServedModel(MODEL_NAME, ModelSpec(os.path.join(base, MODEL_NAME),
                                                  labels={LABEL: MODEL_VERSION}))
        self.registry = ModelRegistry({MODEL_NAME: model}, poll_seconds=0)
        self.registry.poll_all()
        loaded = model.resolve()
        metrics = Metrics()
        limits = validation.Limits(opts.max_request_bytes, opts.max_batch_rows)
        self.predictor = Predictor(self.registry, limits, None, metrics, Watchdog(),
                                   opts.max_decode_work)
        warmup.replay(self.predictor, loaded, warmup.read_requests(loaded.path))  # traced once
        registrar = _Registrar()
        grpc_service.add_to_server(grpc_service.Services(self.predictor, self.registry, metrics),
                                   registrar)
        self.grpc_handlers = registrar.handlers
        self.rest = rest_service.RestApp(self.predictor, self.registry, metrics, None,
                                         opts.rest_api_timeout_s, explain_page=opts.explain_page,
                                         max_json_values=opts.max_json_values,
                                         max_body_bytes=2 * opts.max_request_bytes)
        self.max_message_chars = MAX_MESSAGE_CHARS
        self.client_codes = {getattr(Code, c) for c in CLIENT_CODES}
        self.client_http = {HTTP_STATUS[c] for c in self.client_codes}
        self.counts = collections.Counter()

    def one(self, data: bytes) -> str:
        """Answers one fuzz input; returns and counts its outcome ("grpc Predict OK", "rest
        predict 400"); raises Finding for an answer the server must not give, or when the
        process' RSS peaked more than max_growth_mb above where it was while it was answered
        (its high-water mark is reset before each input: pgn_tf.utils.procfs)."""
        index, payload = split_input(self.methods, data)
        method = self.methods[index]
        before = _peak_kib() if procfs.reset_peak() else None  # the peak is now the RSS
        if method.kind == "grpc":
            outcome = f"grpc {method.name} {self._grpc(method, payload)}"
        else:
            outcome = f"rest {method.name} {self._rest(method, payload)}"
        if before is not None:
            grown = (_peak_kib() - before) / 1024
            if grown > self.max_growth_mb:
                raise Finding(f"{outcome}: the process' RSS peaked {grown:.0f} MB above where "
                              f"it was, answering {len(data)} bytes")
        self.counts[outcome] += 1
        return outcome

    def _check_message(self, where: str, message) -> None:
        if not isinstance(message, str) or len(message) > self.max_message_chars:
            raise Finding(f"{where}: a status message of {len(str(message))} characters")
        if self.base in message:
            raise Finding(f"{where}: a status message names the export's path: {message}")

    def _grpc(self, method: Method, payload: bytes) -> str:
        handler = None
        for h in self.grpc_handlers:
            handler = h.service(_CallDetails(method.path))
            if handler is not None:
                break
        if handler is None:
            return "UNIMPLEMENTED"  # gRPC's answer for a method no handler serves
        context = _Context()
        try:
            response = handler.unary_unary(handler.request_deserializer(payload), context)
            handler.response_serializer(response)
            return "OK"
        except _Aborted as e:
            self._check_message(f"{method.name} {e.code.name}", e.details)
            if e.code not in self.client_codes:
                raise Finding(f"{method.name} answered {e.code.name}: {e.details}") from None
            return e.code.name
        finally:
            for callback in context.callbacks:  # the RPC ended
                callback()

    def _rest(self, method: Method, payload: bytes) -> str:
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": method.path,
                   "CONTENT_LENGTH": str(len(payload)), "wsgi.input": io.BytesIO(payload)}
        if method.encoding:
            environ["HTTP_CONTENT_ENCODING"] = method.encoding
        started = []

        def start_response(status, headers, exc_info=None):
            started.append(status)

        body = b"".join(self.rest(environ, start_response))
        status = int(started[0].split(" ", 1)[0])
        answer = json.loads(body)
        if status != 200:
            self._check_message(f"{method.name} {status}", answer.get("error"))
            if status not in self.client_http:
                raise Finding(f"{method.name} answered HTTP {status}: {answer.get('error')}")
        return str(status)


def serving_modules() -> list:
    """The modules a request passes through, whose functions a campaign instruments."""
    from pgn_tf.serving import (
        grpc_service,
        models,
        predict,
        rest_service,
        rest_transport,
        status,
        validation,
    )

    return [validation, predict, grpc_service, rest_service, rest_transport, status, models]


def _functions(obj, module: str):
    if isinstance(obj, types.FunctionType) and obj.__module__ == module:
        yield obj
    elif isinstance(obj, type) and obj.__module__ == module:
        for v in vars(obj).values():
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            elif isinstance(v, property):
                v = v.fget
            if isinstance(v, types.FunctionType) and v.__module__ == module:
                yield v


def instrument(modules: list) -> int:
    """Adds atheris' coverage instrumentation to the functions and methods defined in
    `modules`, and to tf.make_ndarray; returns how many. Before the harness is built, so the
    closures it makes (grpc_service's request parsers) carry it too."""
    import atheris
    from tensorflow.python.framework import tensor_util

    fns = [fn for mod in modules for obj in list(vars(mod).values())
           for fn in _functions(obj, mod.__name__)]
    for fn in fns + [tensor_util.MakeNdarray]:
        atheris.instrument_func(fn)
    return len(fns) + 1


# -- campaigns, run in a child process -------------------------------------------------------
