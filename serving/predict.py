"""Prediction: find the model version and signature a request names, check its inputs
(serving.validation), count the decoding work they ask for against the server's budget, and run
them, batched (serving.batching) or not, under the request's deadline and cancellation
(serving.cancel). The gRPC and REST services and the warm-up replay all go through `Predictor`.

The work budget: a decoding request costs about rows x beam x decoding steps model steps (each
row's article is cut to the export's max_enc_steps tokens in the graph, so a step's cost per
hypothesis is bounded, and the article bytes by --max_request_bytes). The inputs `beam_size`
and `max_decode_steps` (summarize_options) give the beam and the steps; other signatures use
the export's decoding defaults. Both those defaults and the ranges of the scalar inputs come
from the serving contract stored in the SavedModel (LoadedVersion.contract,
pgn_tf.saved_model.contract). The budget is --max_decode_work, or by default what the largest
serving_default request may cost: --max_batch_rows x the export's beam size x its max decoding
steps. A request over it is refused before it runs. A version whose contract cannot be read is
held to the conservative contract (serving_contract.CONSERVATIVE: beam 4 x 120 steps a row,
summarize_options' scalars capped to those), and a refusal on it says so: never no budget.
"""

from __future__ import annotations

import time

import tensorflow as tf

from pgn_tf.saved_model import contract as serving_contract
from pgn_tf.saved_model.contract import ARTICLES, BEAM_SIZE, MAX_DECODE_STEPS, SERVING_DEFAULT
from pgn_tf.serving import validation
from pgn_tf.serving.batching import BatchScheduler
from pgn_tf.serving.cancel import Call, Watchdog
from pgn_tf.serving.metrics import Metrics
from pgn_tf.serving.models import LoadedVersion, ModelRegistry, Signature, describe_limits
from pgn_tf.serving.status import Code, RequestError, echo, from_exception, invalid

DEFAULT_SIGNATURE = SERVING_DEFAULT


class OverBudget(RequestError):
    """INVALID_ARGUMENT: a request over the version's work budget or its contract's ranges."""

    def __init__(self, message: str):
        super().__init__(Code.INVALID_ARGUMENT, message)


class Predictor:
    """Args:
      registry: the served models; limits: validation.Limits;
      scheduler: a BatchScheduler when batching is on, else None;
      metrics: Metrics, told of every model run's rows;
      watchdog: stops unbatched runs whose request is gone (None: they run to their end);
      max_decode_work: rows x beam x steps a request may ask for (0: derived per version,
        module docstring).
    """

    def __init__(self, registry: ModelRegistry, limits: validation.Limits,
                 scheduler: BatchScheduler | None = None, metrics: Metrics | None = None,
                 watchdog: Watchdog | None = None, max_decode_work: int = 0):
        self.registry = registry
        self.limits = limits
        self.scheduler = scheduler
        self.metrics = metrics
        self.watchdog = watchdog
        self.max_decode_work = max_decode_work

    def resolve(self, name: str, version: int | None = None,
                label: str | None = None) -> LoadedVersion:
        return self.registry.model(name).resolve(version, label)

    @staticmethod
    def signature(loaded: LoadedVersion, name: str) -> Signature:
        sig = loaded.signatures.get(name or DEFAULT_SIGNATURE)
        if sig is None:
            raise invalid(f"Serving signature name: '{echo(name or '')}' not found in signature "
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
        try:
            validation.check_request(sig.inputs, arrays, sizes, self.limits, sig.batchable,
                                     loaded.input_limits.get(sig.name))
            self.check_work(loaded, sig, arrays)
        except RequestError as e:
            if loaded.contract_problem is None:
                raise
            # The limits are the conservative contract's, tighter than the export's may be.
            raise OverBudget(f"{e.message} ({self.conservative_note(loaded)})") from None
        return arrays

    def work_budget(self, loaded: LoadedVersion) -> int:
        """rows x beam x steps one request may ask of `loaded`."""
        if self.max_decode_work:
            return self.max_decode_work
        d = loaded.decode_defaults
        return self.limits.max_batch_rows * d[BEAM_SIZE] * d[MAX_DECODE_STEPS]

    def conservative_note(self, loaded: LoadedVersion) -> str:
        """Why a version without a readable contract refuses what its export might take."""
        limits = loaded.input_limits.get(serving_contract.SUMMARIZE_OPTIONS, {})
        return (f"version {loaded.version} of model '{loaded.name}' has no readable serving "
                f"contract, so this server holds it to the conservative budget: "
                f"{describe_limits(limits)}, rows x beam x steps at most "
                f"{self.work_budget(loaded):,}")

    def check_work(self, loaded: LoadedVersion, sig: Signature, arrays: dict) -> None:
        """Refuses a request whose rows x beam x steps is over the budget (before it runs). A
        signature without an `articles` input decodes nothing (not a summarizer's)."""
        if ARTICLES not in arrays:
            return
        budget = self.work_budget(loaded)
        d = loaded.decode_defaults
        rows = int(arrays[ARTICLES].shape[0]) if arrays[ARTICLES].ndim else 1
        beam = int(arrays[BEAM_SIZE]) if BEAM_SIZE in arrays else d[BEAM_SIZE]
        steps = (int(arrays[MAX_DECODE_STEPS]) if MAX_DECODE_STEPS in arrays
                 else d[MAX_DECODE_STEPS])
        work = rows * beam * steps
        if work > budget:
            raise OverBudget(
                f"request asks for {rows} rows x beam {beam} x {steps} steps = {work:,} decoding "
                f"steps, over the server's --max_decode_work of {budget:,} (rows x beam_size x "
                f"max_decode_steps); send fewer rows, a smaller beam or fewer steps")

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
                call: Call | None = None) -> dict:
        """Runs checked inputs; `call` holds the request's deadline and cancellation, and the
        run stops once it is gone. Raises RequestError (any exception of the run is mapped to
        its status)."""
        call = call or Call()
        if call.gone(time.monotonic()):
            raise call.error() if call.cancelled else RequestError(
                Code.DEADLINE_EXCEEDED, "deadline exceeded before the request ran")
        rows = int(next(iter(inputs.values())).shape[0]) if sig.batchable and inputs else 0
        try:
            if self.scheduler is not None and sig.batchable and rows > 0:
                run = _BoundRun(self, loaded, sig)
                return self.scheduler.submit((loaded, sig.name), run, inputs, call)
            if self.watchdog is None:
                out = self._run(loaded, sig, inputs)
            else:
                out = self.watchdog.run(lambda: self._run(loaded, sig, inputs), [call])
            self._observe(loaded, sig, max(rows, 1))
            return out
        except Exception as e:  # noqa: BLE001  (every failure becomes a proper status)
            raise from_exception(e) from None

    def on_batch(self, key, rows: int, padded: int) -> None:
        """BatchScheduler's callback: one merged batch ran."""
        loaded, sig_name = key
        if self.metrics is not None:
            self.metrics.observe_batch(loaded.name, loaded.version, sig_name, rows)


class _BoundRun:
    """What a batching queue runs: one signature of one loaded version."""

    __slots__ = ("predictor", "loaded", "sig")

    def __init__(self, predictor: Predictor, loaded: LoadedVersion, sig: Signature):
        self.predictor = predictor
        self.loaded = loaded
        self.sig = sig

    def __call__(self, inputs: dict) -> dict:
        return self.predictor._run(self.loaded, self.sig, inputs)

