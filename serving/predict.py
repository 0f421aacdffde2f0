"""Prediction: find the model version and signature a request names, check its inputs
(serving.validation), and run them, batched (serving.batching) or not, within the request's
deadline. The gRPC and REST services and the warm-up replay all go through `Predictor`.
"""

from __future__ import annotations

import time

import tensorflow as tf

from serving import validation
from serving.batching import BatchScheduler
from serving.metrics import Metrics
from serving.models import LoadedVersion, ModelRegistry, Signature
from serving.status import Code, RequestError, from_exception, invalid

DEFAULT_SIGNATURE = "serving_default"


class Predictor:
    """Args:
      registry: the served models; limits: validation.Limits;
      scheduler: a BatchScheduler when batching is on, else None;
      metrics: Metrics, told of every model run's rows.
    """

    def __init__(self, registry: ModelRegistry, limits: validation.Limits,
                 scheduler: BatchScheduler | None = None, metrics: Metrics | None = None):
        self.registry = registry
        self.limits = limits
        self.scheduler = scheduler
        self.metrics = metrics

    def resolve(self, name: str, version: int | None = None,
                label: str | None = None) -> LoadedVersion:
        return self.registry.model(name).resolve(version, label)

    @staticmethod
    def signature(loaded: LoadedVersion, name: str) -> Signature:
        sig = loaded.signatures.get(name or DEFAULT_SIGNATURE)
        if sig is None:
            raise invalid(f"Serving signature name: '{(name or '')[:200]}' not found in signature "
                          f"def (available: {', '.join(sorted(loaded.signatures))})")
        return sig

    @staticmethod
    def check_names(sig: Signature, names) -> None:
        names = set(names)
        missing = sorted(set(sig.inputs) - names)
        extra = sorted(names - set(sig.inputs))
        if missing or extra:
            extra = [e[:100] for e in extra[:10]]
            raise invalid(f"signature '{sig.name}' takes inputs {sorted(sig.inputs)}; "
                          + (f"missing {missing}" if missing else "")
                          + ("; " if missing and extra else "")
                          + (f"unexpected {extra}" if extra else ""))

    def _convert(self, loaded, sig: Signature, values: dict, convert) -> dict:
        self.check_names(sig, values)
        arrays, sizes = {}, {}
        for key, spec in sig.inputs.items():
            arrays[key], sizes[key] = convert(key, values[key], spec, self.limits, sig.batchable)
        validation.check_request(sig.inputs, arrays, sizes, self.limits, sig.batchable,
                                 loaded.input_limits.get(sig.name))
        return arrays

    def inputs_from_protos(self, loaded, sig: Signature, protos: dict) -> dict:
        """{name: TensorProto} -> {name: numpy}, every size checked before it is built."""
        return self._convert(loaded, sig, protos, validation.tensor_from_proto)

    def inputs_from_json(self, loaded, sig: Signature, values: dict) -> dict:
        """{name: JSON value} -> {name: numpy}."""
        return self._convert(loaded, sig, values, validation.tensor_from_json)

    def _run(self, loaded: LoadedVersion, sig: Signature, inputs: dict) -> dict:
        tensors = {k: tf.constant(v, dtype=sig.inputs[k].dtype) for k, v in inputs.items()}
        out = sig.fn(**tensors)
        return {k: v.numpy() for k, v in out.items()}

    def _observe(self, loaded: LoadedVersion, sig: Signature, rows: int) -> None:
        if self.metrics is not None:
            self.metrics.observe_batch(loaded.name, loaded.version, sig.name, rows)

    def predict(self, loaded: LoadedVersion, sig: Signature, inputs: dict,
                deadline: float | None = None) -> dict:
        """Runs checked inputs; `deadline` is a time.monotonic() by which the answer is due.
        Raises RequestError (any exception of the run is mapped to its status)."""
        if deadline is not None and time.monotonic() >= deadline:
            raise RequestError(Code.DEADLINE_EXCEEDED, "deadline exceeded before the request ran")
        rows = int(next(iter(inputs.values())).shape[0]) if sig.batchable and inputs else 0
        try:
            if self.scheduler is not None and sig.batchable and rows > 0:
                run = _BoundRun(self, loaded, sig)
                return self.scheduler.submit((loaded, sig.name), run, inputs, deadline)
            out = self._run(loaded, sig, inputs)
            self._observe(loaded, sig, max(rows, 1))
            return out
        except Exception as e:  # noqa: BLE001  (every failure becomes a proper status)
            raise from_exception(e) from None

    def on_batch(self, key, rows: int, padded: int) -> None:
        """BatchScheduler's callback: one merged batch ran."""
        loaded, sig_name = key
        if self.metrics is not None:
            self.metrics.observe_batch(loaded.name, loaded.version, sig_name, rows)

    def retire(self, loaded: LoadedVersion) -> None:
        """A version stopped serving: drop its batching queues once they drain."""
        if self.scheduler is not None:
            self.scheduler.retire(loaded)


class _BoundRun:
    """What a batching queue runs: one signature of one loaded version."""

    __slots__ = ("predictor", "loaded", "sig")

    def __init__(self, predictor: Predictor, loaded: LoadedVersion, sig: Signature):
        self.predictor = predictor
        self.loaded = loaded
        self.sig = sig

    def __call__(self, inputs: dict) -> dict:
        return self.predictor._run(self.loaded, self.sig, inputs)

