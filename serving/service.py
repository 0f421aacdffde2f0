"""The TF Serving-compatible server as a library: `Server(models, options)` starts the gRPC
and REST services over versioned SavedModels and `stop()` ends them; `ServerOptions` holds what
the command's flags set (named as tensorflow_model_server names them). The command line,
`python -m pgn_tf.serving.server`, parses flags into these and calls them (serving/server.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from pgn_tf.serving import (
    grpc_channel_arguments,
    grpc_server,
    grpc_service,
    rest_service,
    rest_transport,
    tls,
    validation,
    warmup,
)
from pgn_tf.serving.batching import BatchingParameters, BatchScheduler
from pgn_tf.serving.cancel import Watchdog
from pgn_tf.serving.metrics import Metrics
from pgn_tf.serving.models import LoadedVersion, ModelRegistry, ModelSpec, ServedModel
from pgn_tf.serving.predict import Predictor

log = logging.getLogger("serving")


@dataclasses.dataclass
class ServerOptions:
    """Everything a Server is started with besides its models (flag names in comments)."""

    host: str = "127.0.0.1"  # --host
    port: int = 0  # --port (0: any free port)
    rest_port: int | str | None = None  # --rest_api_port (None or 0: no REST; "auto": free port)
    poll_seconds: float = 1.0  # --file_system_poll_wait_seconds
    max_request_bytes: int = 10 * 2**20  # --max_request_bytes
    max_batch_rows: int = 256  # --max_batch_rows
    max_decode_work: int = 0  # --max_decode_work (0: max_batch_rows x the export's beam x steps)
    max_json_values: int = 2**20  # --rest_api_max_json_values
    grpc_max_threads: int = 32  # --grpc_max_threads
    grpc_max_concurrent_rpcs: int = 128  # --grpc_max_concurrent_rpcs
    # --grpc_channel_arguments: gRPC channel arguments over this server's bounds
    # (grpc_channel_arguments.DEFAULT_CHANNEL_ARGUMENTS: streams per connection, connection age, idle, pings)
    grpc_channel_arguments: dict = dataclasses.field(default_factory=dict)
    grpc_request_receive_timeout_s: float = 30.0  # --grpc_request_receive_timeout_seconds
    grpc_max_streams_awaiting_request: int = 2048  # --grpc_max_streams_awaiting_request
    # what streams reading their request message may hold together, at worst
    grpc_awaiting_message_memory_mb: int = 1024  # --grpc_awaiting_message_memory_mb
    rest_api_num_threads: int = 8  # --rest_api_num_threads
    rest_api_timeout_s: float | None = 30.0  # --rest_api_timeout_in_ms / 1000
    rest_api_max_connections: int = 1000  # --rest_api_max_connections
    rest_api_idle_timeout_s: float = 30.0  # --rest_api_idle_timeout_seconds
    # a request's time from its first byte until it is complete, whatever it trickles
    rest_api_request_read_timeout_s: float = 30.0  # --rest_api_request_read_timeout_seconds
    # how long an answer may wait for a client that does not read it
    rest_api_response_write_timeout_s: float = 30.0  # --rest_api_response_write_timeout_seconds
    rest_api_max_connections_per_client: int = 100  # --rest_api_max_connections_per_client
    rest_api_allowed_hosts: tuple[str, ...] = ()  # --rest_api_allowed_hosts (empty: any Host)
    metrics_path: str | None = None  # from --monitoring_config_file
    enable_warmup: bool = True  # --enable_model_warmup
    warmup_iterations: int = 1  # --num_request_iterations_for_warmup
    load_retry_interval_s: float = 60.0  # --load_retry_interval_micros / 1e6
    max_load_retries: int = 5  # --max_num_load_retries
    batching: BatchingParameters | None = None  # --enable_batching, --batching_parameters_file
    explain_page: bool = True  # GET /v1/models/NAME/explain on the REST port; --no_explain_page
    ssl_config: tls.SSLConfig | None = None  # --ssl_config_file: gRPC over TLS
    allow_plaintext_rest: bool = False  # --allow_plaintext_rest: REST beside TLS gRPC

    def validate(self) -> ServerOptions:
        for name in ("max_request_bytes", "max_batch_rows", "grpc_max_threads",
                     "grpc_max_concurrent_rpcs", "grpc_max_streams_awaiting_request",
                     "grpc_awaiting_message_memory_mb",
                     "rest_api_num_threads",
                     "rest_api_max_connections", "warmup_iterations"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive")
        for name in ("max_decode_work", "max_json_values"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must not be negative")
        if self.grpc_max_concurrent_rpcs < self.grpc_max_threads:
            raise ValueError("--grpc_max_concurrent_rpcs must be at least --grpc_max_threads")
        if not self.grpc_request_receive_timeout_s > 0:
            raise ValueError("--grpc_request_receive_timeout_seconds must be positive")
        grpc_channel_arguments.check_channel_arguments(self.grpc_channel_arguments)
        if self.rest_port not in (None, 0, "auto") and (
                not isinstance(self.rest_port, int) or not 0 < self.rest_port < 65536):
            raise ValueError(f"--rest_api_port must be a port number, 0 or auto, got "
                             f"{self.rest_port}")
        if isinstance(self.rest_port, int) and self.rest_port and self.rest_port == self.port:
            raise ValueError("--rest_api_port must differ from --port")
        self._validate_rest()
        if self.batching is not None:
            self.batching.validate()
        if self.ssl_config is not None:
            self.ssl_config.validate()
            if self.rest_port not in (None, 0) and not self.allow_plaintext_rest:
                # waitress has no TLS: REST would be the one port a certificate does not cover
                raise ValueError("--ssl_config_file puts gRPC on TLS but the REST port serves "
                                 "plaintext HTTP: give --rest_api_port 0, or "
                                 "--allow_plaintext_rest to serve REST unencrypted beside it")
        return self

    def _validate_rest(self) -> None:
        for name, value in (("rest_api_idle_timeout_seconds", self.rest_api_idle_timeout_s),
                            ("rest_api_request_read_timeout_seconds",
                             self.rest_api_request_read_timeout_s),
                            ("rest_api_response_write_timeout_seconds",
                             self.rest_api_response_write_timeout_s)):
            if not value > 0:
                raise ValueError(f"--{name} must be positive, got {value}")
        per_client = self.rest_api_max_connections_per_client
        if not 0 < per_client <= self.rest_api_max_connections:
            raise ValueError(f"--rest_api_max_connections_per_client must be in [1, "
                             f"--rest_api_max_connections={self.rest_api_max_connections}], got "
                             f"{per_client} (equal to it: no per-client cap, e.g. behind a proxy)")
        rest_service.parse_allowed_hosts(self.rest_api_allowed_hosts)


def read_model_config(path: str) -> dict[str, ModelSpec]:
    """A ModelServerConfig text file -> {name: ModelSpec}; ValueError for what this server
    cannot honour (other platforms, logging_config, custom_model_config)."""
    cfg = model_server_config_pb2.ModelServerConfig()
    with open(path) as f:
        try:
            text_format.Parse(f.read(), cfg)
        except text_format.ParseError as e:
            raise ValueError(f"bad --model_config_file {path}: {e}") from None
    if cfg.HasField("custom_model_config"):
        raise ValueError(f"--model_config_file {path}: custom_model_config is not supported")
    out = {}
    for m in cfg.model_config_list.config:
        where = f"--model_config_file {path}, model '{m.name}'"
        if not m.name or not m.base_path:
            raise ValueError(f"{where}: needs a name and a base_path")
        if m.name in out:
            raise ValueError(f"{where}: listed twice")
        if m.model_platform not in ("", "tensorflow"):
            raise ValueError(f"{where}: model_platform '{m.model_platform}' is not supported "
                             "(only tensorflow)")
        if m.HasField("logging_config"):
            raise ValueError(f"{where}: logging_config (request logging) is not supported")
        policy = m.model_version_policy
        which = policy.WhichOneof("policy_choice")
        labels = {k: int(v) for k, v in m.version_labels.items()}
        try:
            if which == "specific":
                out[m.name] = ModelSpec(m.base_path, "specific",
                                        versions=tuple(int(v) for v in policy.specific.versions),
                                        labels=labels)
            elif which == "all":
                out[m.name] = ModelSpec(m.base_path, "all", labels=labels)
            else:
                n = policy.latest.num_versions if which == "latest" else 1
                out[m.name] = ModelSpec(m.base_path, "latest", num_versions=n or 1, labels=labels)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    if not out:
        raise ValueError(f"--model_config_file {path} lists no model")
    return out


def as_model_spec(spec) -> ModelSpec:
    """A ModelSpec, a base path (its latest version), or (base path, num_versions)."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, tuple):
        base, n = spec
        return ModelSpec(str(base), "latest", num_versions=int(n))
    return ModelSpec(str(spec))


class Server:
    """The running servers; `stop()` shuts them down. Used by main() and by tests.

    Args:
      models: {name: ModelSpec, base path, or (base path, num_versions)}.
      options: ServerOptions; keyword arguments override its fields.
    """

    def __init__(self, models: dict, options: ServerOptions | None = None, **overrides):
        opts = dataclasses.replace(options or ServerOptions(), **overrides).validate()
        self.options = opts
        self.metrics = Metrics(live_versions=self._live_versions)
        self.watchdog = Watchdog()
        self.scheduler = None
        if opts.batching is not None:
            self.scheduler = BatchScheduler(opts.batching, watchdog=self.watchdog)
        limits = validation.Limits(opts.max_request_bytes, opts.max_batch_rows)
        self.registry = ModelRegistry({}, opts.poll_seconds)
        self.predictor = Predictor(self.registry, limits, self.scheduler, self.metrics,
                                   self.watchdog, opts.max_decode_work)
        if self.scheduler is not None:
            self.scheduler.on_batch = self.predictor.on_batch
        for name, spec in models.items():
            spec = as_model_spec(spec)
            self.registry.models[name] = ServedModel(
                name, spec, load=self._load, load_retry_interval_s=opts.load_retry_interval_s,
                max_load_retries=opts.max_load_retries)
        self.grpc = None
        self.http = None
        self.rest_port = None
        try:
            self.registry.start()
            self._start_grpc(opts)
            if opts.rest_port not in (None, 0):
                self._start_rest(opts)
        except BaseException:
            self.stop()
            raise

    def _live_versions(self) -> int:
        """Versions alive in the process; the cycle collector runs first only when more are
        alive than loaded (a scrape then tells what is really kept)."""
        loaded = sum(len(m.loaded_versions()) for m in self.registry.models.values())
        live = LoadedVersion.live()
        return live if live <= loaded else LoadedVersion.live(collect=True)

    def _load(self, name: str, version: int, path: str) -> LoadedVersion:
        """Loads a version and replays its warm-up requests before it may serve."""
        loaded = LoadedVersion(name, version, path)
        if self.options.enable_warmup:
            requests = warmup.read_requests(path)
            n = warmup.replay(self.predictor, loaded, requests, self.options.warmup_iterations)
            if n:
                log.info("model %s version %d: replayed %d warm-up requests", name, version, n)
        return loaded

    def _start_grpc(self, opts: ServerOptions) -> None:
        # Received: gRPC stops inflating a compressed request at this size, before it is
        # parsed (validation.Limits.max_message_bytes). Sent: a summarize_verbose answer's
        # attention is rows x steps x article floats, not bounded by the request's bytes.
        receive = self.predictor.limits.max_message_bytes
        send = max(4 * opts.max_request_bytes, 64 * 2**20)
        # the server's own, then its bounds, then --grpc_channel_arguments over both (as in
        # tensorflow_model_server, whose flag's arguments come after its own)
        options = {"grpc.max_receive_message_length": receive,
                   "grpc.max_send_message_length": send,
                   **grpc_channel_arguments.DEFAULT_CHANNEL_ARGUMENTS, **opts.grpc_channel_arguments}
        if options["grpc.max_receive_message_length"] > receive:
            # the input checks would then parse what they can never accept
            raise ValueError(f"--grpc_channel_arguments: grpc.max_receive_message_length must "
                             f"be at most {receive}, the largest request --max_request_bytes "
                             "admits; raise --max_request_bytes instead")
        # each reading stream may hold a whole message: the memory budget over that
        per_stream = options["grpc.max_receive_message_length"] + \
            grpc_channel_arguments.STREAM_OVERHEAD_BYTES
        max_reading = max(1, opts.grpc_awaiting_message_memory_mb * 2**20 // per_stream)
        credentials = None  # never the insecure port when a certificate is given
        if opts.ssl_config is not None:
            credentials = tls.server_credentials(opts.ssl_config)
        self.grpc = grpc_server.GrpcServer(
            grpc_service.method_table(
                grpc_service.Services(self.predictor, self.registry, self.metrics)),
            f"[{opts.host}]:{opts.port}" if ":" in opts.host else f"{opts.host}:{opts.port}",
            credentials, max_threads=opts.grpc_max_threads,
            max_concurrent_rpcs=opts.grpc_max_concurrent_rpcs,
            receive_timeout_s=opts.grpc_request_receive_timeout_s,
            max_awaiting=opts.grpc_max_streams_awaiting_request, max_reading=max_reading,
            options=list(options.items()))
        self.port = self.grpc.port

    def _start_rest(self, opts: ServerOptions) -> None:
        app = rest_service.RestApp(self.predictor, self.registry, self.metrics,
                                   opts.metrics_path, opts.rest_api_timeout_s,
                                   explain_page=opts.explain_page,
                                   max_json_values=opts.max_json_values,
                                   max_body_bytes=2 * opts.max_request_bytes,
                                   allowed_hosts=opts.rest_api_allowed_hosts)
        self._http_map: dict = {}
        self.http = rest_transport.make_server(
            app, opts.host, 0 if opts.rest_port == "auto" else opts.rest_port,
            opts.rest_api_num_threads, opts.rest_api_max_connections,
            opts.rest_api_idle_timeout_s, 2 * opts.max_request_bytes, self._http_map,
            request_timeout_s=opts.rest_api_request_read_timeout_s,
            max_connections_per_client=opts.rest_api_max_connections_per_client,
            response_timeout_s=opts.rest_api_response_write_timeout_s)
        self.rest_port = int(self.http.effective_port)
        self._http_thread = threading.Thread(target=self.http.run, daemon=True, name="rest-io")
        self._http_thread.start()

    def stop(self) -> None:
        if self.http is not None:
            from waitress import wasyncore

            self.http.task_dispatcher.shutdown(timeout=5)
            wasyncore.close_all(self._http_map)  # the I/O loop ends with its map empty
            self._http_thread.join(timeout=10)
            self.http = None
        if self.grpc is not None:
            self.grpc.stop(grace=2)
            self.grpc = None
        if self.scheduler is not None:
            self.scheduler.close()
        self.registry.stop()
        self.watchdog.close()
