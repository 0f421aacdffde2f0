"""Prometheus metrics, exposed as TF Serving exposes them: on the REST port at the path of
`--monitoring_config_file` (`prometheus_config { enable: true, path:
"/monitoring/prometheus/metrics" }`, TF Serving's MonitoringConfig text format).

Built on prometheus_client (the Prometheus project's own Python client: its text exposition
format, histogram buckets and thread safety are kept there). Each Server has its own registry.
Series, per model and version (names as TF Serving's, with `:` for `/`):

  :tensorflow:serving:request_count_total   counter   model_name, version, api, protocol, status
  :tensorflow:serving:request_latency_seconds  histogram  model_name, version, api, protocol
  :tensorflow:serving:batch_size            histogram  model_name, version, signature
      (rows of each model run; with batching, the merged batch before padding)
  :pgn_tf:serving:live_versions             gauge      (none)
      (model versions alive in the process, loaded or still referenced: above the loaded
      count only while requests finish on a version just unloaded; serving.models)

`model_name` is only ever a served model's name (a request for an unknown model counts under
""), so clients cannot grow the number of series.
"""

from __future__ import annotations

import time

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

disable_created_metrics()  # no *_created series: TF Serving has none, and they double the text

DEFAULT_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _monitoring_message_class():
    """TF Serving's MonitoringConfig (monitoring_config.proto, not in the pip package)."""
    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(
            pool.FindMessageTypeByName("pgn_tf_serving.MonitoringConfig"))
    except KeyError:
        pass
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="pgn_tf_serving/monitoring_config.proto",
                                             package="pgn_tf_serving", syntax="proto3")
    prom = fdp.message_type.add(name="PrometheusConfig")
    prom.field.add(name="enable", number=1, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    prom.field.add(name="path", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    mon = fdp.message_type.add(name="MonitoringConfig")
    mon.field.add(name="prometheus_config", number=1, type=F.TYPE_MESSAGE,
                  type_name=".pgn_tf_serving.PrometheusConfig", label=F.LABEL_OPTIONAL)
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("pgn_tf_serving.MonitoringConfig"))


def parse_monitoring_config(text: str) -> str | None:
    """The metrics path a MonitoringConfig enables, or None; ValueError for a bad config."""
    msg = _monitoring_message_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ValueError(f"bad monitoring config: {e}") from None
    prom = msg.prometheus_config
    if not prom.enable:
        return None
    path = prom.path or DEFAULT_PATH
    if not path.startswith("/") or path.startswith("/v1/"):
        raise ValueError(f"bad monitoring config: path must start with / and not /v1/, got "
                         f"'{path}'")
    return path


class Metrics:
    """The server's counters and histograms in one registry."""

    def __init__(self, live_versions=None):
        """live_versions: callable() -> the versions alive in the process (a gauge), or None."""
        self.registry = CollectorRegistry()
        if live_versions is not None:
            Gauge(":pgn_tf:serving:live_versions", "Model versions alive in the process",
                  registry=self.registry).set_function(live_versions)
        self.requests = Counter(":tensorflow:serving:request_count", "Requests answered",
                                ["model_name", "version", "api", "protocol", "status"],
                                registry=self.registry)
        self.latency = Histogram(":tensorflow:serving:request_latency_seconds",
                                 "Request latency in seconds",
                                 ["model_name", "version", "api", "protocol"],
                                 buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram(":tensorflow:serving:batch_size", "Rows of each model run",
                                    ["model_name", "version", "signature"],
                                    buckets=_BATCH_BUCKETS, registry=self.registry)

    def observe_request(self, model: str, version, api: str, protocol: str, status: str,
                        started: float) -> None:
        v = "" if version is None else str(version)
        self.requests.labels(model, v, api, protocol, status).inc()
        self.latency.labels(model, v, api, protocol).observe(time.perf_counter() - started)

    def observe_batch(self, model: str, version: int, signature: str, rows: int) -> None:
        self.batch_size.labels(model, str(version), signature).observe(rows)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
