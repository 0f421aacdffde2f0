"""A TF Serving-compatible server over versioned SavedModels: gRPC + REST.

    python -m pgn_tf.serving.server --model_name pgn --model_base_path BASE/pgn \
        --port 8500 --rest_api_port 8501 [--enable_batching --batching_parameters_file F]

Flags are named as tensorflow_model_server names them and mean the same (`--rest_api_port=0`,
the default, serves no REST; `auto` picks a free port); the server's own limits are
`--max_request_bytes`, `--max_batch_rows`, `--grpc_max_concurrent_rpcs`,
`--grpc_request_receive_timeout_seconds`, `--grpc_max_streams_awaiting_request` (gRPC's own
connection bounds are set through TF Serving's `--grpc_channel_arguments`),
`--rest_api_max_connections`, `--rest_api_idle_timeout_seconds`,
`--rest_api_request_read_timeout_seconds`, `--rest_api_response_write_timeout_seconds` and
`--rest_api_max_connections_per_client`;
`--rest_api_allowed_hosts` answers only the Host names it lists. `--ssl_config_file` (TF
Serving's SSLConfig, serving.tls) puts gRPC on TLS; the REST port, plaintext HTTP, then stays
closed unless `--allow_plaintext_rest` opens it. Modules: serving.service (the library:
Server, ServerOptions), serving.validation (request checks),
serving.predict (version, signature, run), serving.batching, serving.models (versions on disk),
serving.warmup, serving.grpc_service, serving.grpc_server (the gRPC server on grpc.aio),
serving.rest_service (the REST API), serving.rest_transport (its HTTP and connection bounds),
serving.metrics, serving.status (errors), serving.tls. Binds to 127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.serving.server"))
import argparse
import logging
import signal
import sys
import threading

from pgn_tf.serving import tls
from pgn_tf.serving.batching import BatchingParameters, parse_batching_parameters
from pgn_tf.serving.grpc_channel_arguments import DEFAULT_CHANNEL_ARGUMENTS, parse_channel_arguments
from pgn_tf.serving.metrics import parse_monitoring_config
from pgn_tf.serving.models import ModelSpec
from pgn_tf.serving.service import Server, ServerOptions, read_model_config
from pgn_tf.utils.quiet import add_verbose_flag

log = logging.getLogger("serving")


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
                   help="RPCs whose request message arrived, in progress or waiting for a "
                        "thread; more get RESOURCE_EXHAUSTED")
    p.add_argument("--grpc_channel_arguments", default="",
                   help="comma-separated gRPC channel arguments for the gRPC server, as "
                        "tensorflow_model_server takes them (e.g. "
                        "grpc.max_connection_age_ms=2000); they override this server's bounds: "
                        + ", ".join(f"{k}={v}" for k, v in DEFAULT_CHANNEL_ARGUMENTS.items()))
    # New names: tensorflow_model_server has neither, as gRPC's C++ server hands it a unary call
    # only once gRPC has read the request message (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER), so
    # there a stalled stream holds no handler; in Python the handler must read the message.
    p.add_argument("--grpc_request_receive_timeout_seconds", type=float,
                   default=d.grpc_request_receive_timeout_s,
                   help="a gRPC call whose request message has not arrived this long after the "
                        "call started is ended with DEADLINE_EXCEEDED (each call's limit drawn "
                        "between 3/4 of this and all of it, so a burst does not end at once)")
    p.add_argument("--grpc_max_streams_awaiting_request", type=int,
                   default=d.grpc_max_streams_awaiting_request,
                   help="gRPC calls waiting for their request message at most, over all "
                        "connections, reading or parked; past it the oldest parked one (else "
                        "the oldest) is ended with RESOURCE_EXHAUSTED")
    p.add_argument("--grpc_awaiting_message_memory_mb", type=int,
                   default=d.grpc_awaiting_message_memory_mb,
                   help="MiB that gRPC calls reading their request message may hold together "
                        "at worst (each up to the receive limit): this over the limit is how "
                        "many read at once; the rest are parked, holding at most 64 KiB each")
    p.add_argument("--rest_api_num_threads", type=int, default=d.rest_api_num_threads)
    p.add_argument("--rest_api_timeout_in_ms", type=int, default=int(d.rest_api_timeout_s * 1000),
                   help="deadline of a REST request (0: none)")
    p.add_argument("--rest_api_max_connections", type=int, default=d.rest_api_max_connections,
                   help="open REST connections at most; more wait in the listen backlog")
    p.add_argument("--rest_api_idle_timeout_seconds", type=float,
                   default=d.rest_api_idle_timeout_s,
                   help="an idle or stalled REST connection is closed after this")
    p.add_argument("--rest_api_request_read_timeout_seconds", type=float,
                   default=d.rest_api_request_read_timeout_s,
                   help="a REST request not complete (request line, headers, body) this long "
                        "after its first byte is answered 408 and closed, however it trickles")
    p.add_argument("--rest_api_response_write_timeout_seconds", type=float,
                   default=d.rest_api_response_write_timeout_s,
                   help="a REST connection whose answer has waited this long for a client that "
                        "does not read it (however little it reads) is closed with a reset")
    p.add_argument("--rest_api_max_connections_per_client", type=int,
                   default=d.rest_api_max_connections_per_client,
                   help="open REST connections one client address (IPv6: its /64) may hold; "
                        "more are closed at once with 503 (--rest_api_max_connections: no cap)")
    p.add_argument("--rest_api_allowed_hosts", default="",
                   help="comma-separated host names or host:port; a REST request whose Host "
                        "header is none of them is refused with 421 (against DNS rebinding; "
                        "default: any Host, as TF Serving)")
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
    p.add_argument("--ssl_config_file",
                   help="SSLConfig text file, as tensorflow_model_server reads it (server_key, "
                        "server_cert, custom_ca: PEM texts; client_verify): gRPC over TLS")
    p.add_argument("--ssl_config_file_strict_permissions", default=False, **flag,
                   help="refuse an --ssl_config_file that group or others may open (it holds "
                        "the private key); without it such a file gets one warning")
    p.add_argument("--allow_plaintext_rest", action="store_true",
                   help="with --ssl_config_file: serve the REST port anyway, in plaintext HTTP "
                        "(it has no TLS)")
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
    ssl_config = tls.read_ssl_config(
        args.ssl_config_file, strict_permissions=args.ssl_config_file_strict_permissions) \
        if args.ssl_config_file else None
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
        grpc_channel_arguments=parse_channel_arguments(args.grpc_channel_arguments),
        grpc_request_receive_timeout_s=args.grpc_request_receive_timeout_seconds,
        grpc_max_streams_awaiting_request=args.grpc_max_streams_awaiting_request,
        grpc_awaiting_message_memory_mb=args.grpc_awaiting_message_memory_mb,
        rest_api_num_threads=args.rest_api_num_threads,
        rest_api_timeout_s=args.rest_api_timeout_in_ms / 1000 or None,
        rest_api_max_connections=args.rest_api_max_connections,
        rest_api_idle_timeout_s=args.rest_api_idle_timeout_seconds,
        rest_api_request_read_timeout_s=args.rest_api_request_read_timeout_seconds,
        rest_api_response_write_timeout_s=args.rest_api_response_write_timeout_seconds,
        rest_api_max_connections_per_client=args.rest_api_max_connections_per_client,
        rest_api_allowed_hosts=tuple(h.strip() for h in args.rest_api_allowed_hosts.split(",")
                                     if h.strip()),
        metrics_path=metrics_path,
        enable_warmup=args.enable_model_warmup,
        warmup_iterations=args.num_request_iterations_for_warmup,
        load_retry_interval_s=args.load_retry_interval_micros / 1e6,
        max_load_retries=args.max_num_load_retries, batching=batching,
        explain_page=not args.no_explain_page, ssl_config=ssl_config,
        allow_plaintext_rest=args.allow_plaintext_rest)
    return models, opts.validate()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # queue depth: see metrics
    args = build_parser().parse_args(argv)
    try:
        models, opts = options_from_args(args)
        server = Server(models, opts)
    except (ValueError, OSError) as e:
        # without_key_material: a last guard, should a message ever quote a PEM text
        print(f"pgn_tf.serving.server: error: {tls.without_key_material(str(e))}",
              file=sys.stderr)
        return 2
    for name, m in server.registry.models.items():
        if not m.has_loaded():
            log.warning("model %s: no loadable version yet; polling", name)
    secure, rest = "", ""
    if opts.ssl_config is not None:
        secure = " over TLS" + (" (client certificates required)"
                                if opts.ssl_config.client_verify else "")
    if server.rest_port:
        rest = f", REST on {opts.host}:{server.rest_port}" + (" (plaintext)" if secure else "")
    log.info("serving %s: gRPC on %s:%d%s%s", ", ".join(server.registry.models), opts.host,
             server.port, secure, rest)
    print(f"READY grpc={server.port} rest={server.rest_port or ''}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0
