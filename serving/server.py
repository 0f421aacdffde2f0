"""A TF Serving-compatible server over versioned SavedModels: gRPC + REST.

    python -m pgn_tf.serving.server --model_name pgn --model_base_path BASE/pgn \
        --port 8500 --rest_api_port 8501 [--enable_batching --batching_parameters_file F]

Flags are named as tensorflow_model_server names them and mean the same (`--rest_api_port=0`,
the default, serves no REST; `auto` picks a free port); the server's own limits are
`--max_request_bytes`, `--max_batch_rows`, `--grpc_max_concurrent_rpcs`,
`--rest_api_max_connections` and `--rest_api_idle_timeout_seconds`. Modules:
serving.validation (request checks), serving.predict (version, signature, run),
serving.batching, serving.models (versions on disk), serving.warmup, serving.grpc_service,
serving.rest_service, serving.metrics, serving.status (errors). Binds to 127.0.0.1 unless
--host says otherwise.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.serving.server"))
import argparse
import dataclasses
import logging
import signal
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from pgn_tf.serving import grpc_service, rest_service, validation, warmup
from pgn_tf.serving.batching import BatchingParameters, BatchScheduler, parse_batching_parameters
from pgn_tf.serving.cancel import Watchdog
from pgn_tf.serving.metrics import Metrics, parse_monitoring_config
from pgn_tf.serving.models import LoadedVersion, ModelRegistry, ModelSpec, ServedModel
from pgn_tf.serving.predict import Predictor
from pgn_tf.utils.quiet import add_verbose_flag

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
    rest_api_num_threads: int = 8  # --rest_api_num_threads
    rest_api_timeout_s: float | None = 30.0  # --rest_api_timeout_in_ms / 1000
    rest_api_max_connections: int = 1000  # --rest_api_max_connections
    rest_api_idle_timeout_s: float = 30.0  # --rest_api_idle_timeout_seconds
    metrics_path: str | None = None  # from --monitoring_config_file
    enable_warmup: bool = True  # --enable_model_warmup
    warmup_iterations: int = 1  # --num_request_iterations_for_warmup
    load_retry_interval_s: float = 60.0  # --load_retry_interval_micros / 1e6
    max_load_retries: int = 5  # --max_num_load_retries
    batching: BatchingParameters | None = None  # --enable_batching, --batching_parameters_file
    explain_page: bool = True  # GET /v1/models/NAME/explain on the REST port; --no_explain_page

    def validate(self) -> ServerOptions:
        for name in ("max_request_bytes", "max_batch_rows", "grpc_max_threads",
                     "grpc_max_concurrent_rpcs", "rest_api_num_threads",
                     "rest_api_max_connections", "warmup_iterations"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive")
        for name in ("max_decode_work", "max_json_values"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must not be negative")
        if self.grpc_max_concurrent_rpcs < self.grpc_max_threads:
            raise ValueError("--grpc_max_concurrent_rpcs must be at least --grpc_max_threads")
        if self.rest_port not in (None, 0, "auto") and (
                not isinstance(self.rest_port, int) or not 0 < self.rest_port < 65536):
            raise ValueError(f"--rest_api_port must be a port number, 0 or auto, got "
                             f"{self.rest_port}")
        if isinstance(self.rest_port, int) and self.rest_port and self.rest_port == self.port:
            raise ValueError("--rest_api_port must differ from --port")
        if self.batching is not None:
            self.batching.validate()
        return self


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
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=opts.grpc_max_threads,
                                       thread_name_prefix="grpc"),
            options=[("grpc.max_receive_message_length", receive),
                     ("grpc.max_send_message_length", send)],
            maximum_concurrent_rpcs=opts.grpc_max_concurrent_rpcs)
        grpc_service.add_to_server(
            grpc_service.Services(self.predictor, self.registry, self.metrics), self.grpc)
        self.port = self.grpc.add_insecure_port(f"{opts.host}:{opts.port}")
        if self.port == 0:
            raise ValueError(f"cannot bind gRPC to {opts.host}:{opts.port}")
        self.grpc.start()

    def _start_rest(self, opts: ServerOptions) -> None:
        app = rest_service.RestApp(self.predictor, self.registry, self.metrics,
                                   opts.metrics_path, opts.rest_api_timeout_s,
                                   explain_page=opts.explain_page,
                                   max_json_values=opts.max_json_values,
                                   max_body_bytes=2 * opts.max_request_bytes)
        self._http_map: dict = {}
        self.http = rest_service.make_server(
            app, opts.host, 0 if opts.rest_port == "auto" else opts.rest_port,
            opts.rest_api_num_threads, opts.rest_api_max_connections,
            opts.rest_api_idle_timeout_s, 2 * opts.max_request_bytes, self._http_map)
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
            self.grpc.stop(grace=2).wait()
            self.grpc = None
        if self.scheduler is not None:
            self.scheduler.close()
        self.registry.stop()
        self.watchdog.close()


def _flag_bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _rest_port(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, 0 or auto, got '{text}'") \
            from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.serving.server",
                                description=__doc__.splitlines()[0])
    d = ServerOptions()
    flag = dict(nargs="?", const=True, type=_flag_bool)
    p.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free port)")
    p.add_argument("--rest_api_port", type=_rest_port, default=0,
                   help="REST port; 0 (default): no REST, as in TF Serving; auto: any free port")
    p.add_argument("--host", default=d.host, help="address to bind (default loopback only)")
    p.add_argument("--model_name", default="default")
    p.add_argument("--model_base_path")
    p.add_argument("--model_config_file")
    p.add_argument("--num_versions", type=int, default=1,
                   help="with --model_base_path: how many of the highest versions stay loaded")
    p.add_argument("--enable_batching", default=False, **flag)
    p.add_argument("--batching_parameters_file")
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=d.poll_seconds)
    p.add_argument("--max_num_load_retries", type=int, default=d.max_load_retries)
    p.add_argument("--load_retry_interval_micros", type=int,
                   default=int(d.load_retry_interval_s * 1e6),
                   help="first wait before a failed version is retried; it doubles each retry")
    p.add_argument("--enable_model_warmup", default=d.enable_warmup, **flag)
    p.add_argument("--num_request_iterations_for_warmup", type=int, default=d.warmup_iterations)
    p.add_argument("--monitoring_config_file",
                   help="MonitoringConfig text file; prometheus_config { enable: true } serves "
                        "metrics on the REST port")
    p.add_argument("--grpc_max_threads", type=int, default=d.grpc_max_threads)
    p.add_argument("--grpc_max_concurrent_rpcs", type=int, default=d.grpc_max_concurrent_rpcs,
                   help="RPCs in progress or waiting for a thread; more get RESOURCE_EXHAUSTED")
    p.add_argument("--rest_api_num_threads", type=int, default=d.rest_api_num_threads)
    p.add_argument("--rest_api_timeout_in_ms", type=int, default=int(d.rest_api_timeout_s * 1000),
                   help="deadline of a REST request (0: none)")
    p.add_argument("--rest_api_max_connections", type=int, default=d.rest_api_max_connections,
                   help="open REST connections at most; more wait in the listen backlog")
    p.add_argument("--rest_api_idle_timeout_seconds", type=float,
                   default=d.rest_api_idle_timeout_s,
                   help="an idle or stalled REST connection is closed after this")
    p.add_argument("--max_request_bytes", type=int, default=d.max_request_bytes,
                   help="bytes of a request's input tensors at most (REST bodies: twice that)")
    p.add_argument("--max_batch_rows", type=int, default=d.max_batch_rows,
                   help="rows (dimension 0) of a request's inputs at most")
    p.add_argument("--max_decode_work", type=int, default=d.max_decode_work,
                   help="rows x beam_size x max_decode_steps one request may ask for (default "
                        "0: --max_batch_rows x the export's beam size x its max decoding steps)")
    p.add_argument("--rest_api_max_json_values", type=int, default=d.max_json_values,
                   help="JSON values (numbers, strings, lists, objects, keys) in one REST body "
                        "at most; counted before the body is parsed")
    p.add_argument("--no_explain_page", action="store_true",
                   help="do not serve the explanation page, GET /v1/models/NAME/explain on the "
                        "REST port (summary tokens coloured by p_gen, attention on hover)")
    add_verbose_flag(p)
    return p


def options_from_args(args) -> tuple[dict, ServerOptions]:
    """Parsed flags -> (models, ServerOptions); ValueError or OSError for a bad flag or file."""
    if args.model_config_file:
        models = read_model_config(args.model_config_file)
    elif args.model_base_path:
        models = {args.model_name: ModelSpec(args.model_base_path, "latest",
                                             num_versions=args.num_versions)}
    else:
        raise ValueError("give --model_base_path (with --model_name) or --model_config_file")
    batching = None
    if args.enable_batching:
        batching = BatchingParameters()
        if args.batching_parameters_file:
            with open(args.batching_parameters_file) as f:
                batching = parse_batching_parameters(f.read())
    elif args.batching_parameters_file:
        raise ValueError("--batching_parameters_file needs --enable_batching")
    metrics_path = None
    if args.monitoring_config_file:
        with open(args.monitoring_config_file) as f:
            metrics_path = parse_monitoring_config(f.read())
        if metrics_path and args.rest_api_port == 0:
            raise ValueError("--monitoring_config_file serves metrics on the REST port: give "
                             "--rest_api_port")
    opts = ServerOptions(
        host=args.host, port=args.port, rest_port=args.rest_api_port,
        poll_seconds=args.file_system_poll_wait_seconds, max_request_bytes=args.max_request_bytes,
        max_batch_rows=args.max_batch_rows, max_decode_work=args.max_decode_work,
        max_json_values=args.rest_api_max_json_values, grpc_max_threads=args.grpc_max_threads,
        grpc_max_concurrent_rpcs=args.grpc_max_concurrent_rpcs,
        rest_api_num_threads=args.rest_api_num_threads,
        rest_api_timeout_s=args.rest_api_timeout_in_ms / 1000 or None,
        rest_api_max_connections=args.rest_api_max_connections,
        rest_api_idle_timeout_s=args.rest_api_idle_timeout_seconds, metrics_path=metrics_path,
        enable_warmup=args.enable_model_warmup,
        warmup_iterations=args.num_request_iterations_for_warmup,
        load_retry_interval_s=args.load_retry_interval_micros / 1e6,
        max_load_retries=args.max_num_load_retries, batching=batching,
        explain_page=not args.no_explain_page)
    return models, opts.validate()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # queue depth: see metrics
    args = build_parser().parse_args(argv)
    try:
        models, opts = options_from_args(args)
        server = Server(models, opts)
    except (ValueError, OSError) as e:
        print(f"pgn_tf.serving.server: error: {e}", file=sys.stderr)
        return 2
    for name, m in server.registry.models.items():
        if not m.has_loaded():
            log.warning("model %s: no loadable version yet; polling", name)
    rest = f", REST on {opts.host}:{server.rest_port}" if server.rest_port else ""
    log.info("serving %s: gRPC on %s:%d%s", ", ".join(server.registry.models), opts.host,
             server.port, rest)
    print(f"READY grpc={server.port} rest={server.rest_port or ''}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0
