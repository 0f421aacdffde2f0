"""Model warm-up, as TF Serving does it: `VERSION/assets.extra/tf_serving_warmup_requests` is a
TFRecord file of `tensorflow.serving.PredictionLog` protos; each record's
`predict_log.request` is run (`--num_request_iterations_for_warmup` times) after the version
loads and before it is marked AVAILABLE, so the first real request does not pay for tracing and
graph optimisation. `pgn_tf.export` writes the file; stock TF Serving replays the same one.

A record that is not a predict_log, more than MAX_RECORDS records, or a request that fails makes
the version's load fail (it is then retried like any failed load), as in TF Serving. One
exception: on a version served with the conservative contract (its own could not be read:
serving.models), a request refused by that contract's limits is skipped, not a failure, since
no client may send it either; the version still loads, within those limits.
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from pgn_tf.serving.predict import OverBudget

log = logging.getLogger("serving")

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_RECORDS = 1000  # TF Serving's limit


def read_requests(version_dir: str) -> list:
    """The PredictRequests of a version's warm-up file (empty when it has none)."""
    path = os.path.join(version_dir, WARMUP_FILE)
    if not tf.io.gfile.exists(path):
        return []
    out = []
    for i, raw in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        if i >= MAX_RECORDS:
            raise ValueError(f"warm-up file has more than {MAX_RECORDS} records")
        log = prediction_log_pb2.PredictionLog.FromString(raw)
        kind = log.WhichOneof("log_type")
        if kind != "predict_log":
            raise ValueError(f"warm-up record {i} is a {kind}; this server replays predict_log "
                             "records only")
        out.append(log.predict_log.request)
    return out


def replay(predictor, loaded, requests: list, iterations: int = 1) -> int:
    """Runs each warm-up request on `loaded` through the predictor's checks; returns the count.
    Raises ValueError naming the record that failed."""
    n, skipped = 0, set()
    for _ in range(iterations):
        for i, request in enumerate(requests):
            try:
                sig = predictor.signature(loaded, request.model_spec.signature_name)
                inputs = predictor.inputs_from_protos(loaded, sig, dict(request.inputs))
                predictor.predict(loaded, sig, inputs)
            except OverBudget as e:
                if loaded.contract_problem is None:
                    raise ValueError(f"warm-up request {i} failed: {e.message}") from None
                skipped.add(i)
                continue
            except Exception as e:
                message = getattr(e, "message", None) or str(e)
                raise ValueError(f"warm-up request {i} failed: {message}") from None
            n += 1
    if skipped:
        log.info("model %s version %d: skipped warm-up requests %s, over the conservative "
                 "contract's limits", loaded.name, loaded.version, sorted(skipped))
    return n
