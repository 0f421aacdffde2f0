"""`python -m pgn_tf.serving.client --server localhost:8500 --model_name NAME [TEXT | -] [--rest]`

Talks to serving.server or a stock tensorflow_model_server with the unmodified
tensorflow-serving-api stubs (gRPC) or TF Serving's REST API (--rest, --server host:8501).
`--ssl_ca CA.pem [--ssl_cert CERT.pem --ssl_key KEY.pem]` calls a server started with
`--ssl_config_file` over TLS (with a client certificate where it sets client_verify); the
files are checked before the call, and no error quotes them.

    from pgn_tf.serving.client import summarize
    summaries = summarize("localhost:8500", "pgn", ["an article ..."])
    creds = tls.channel_credentials("ca.pem", "client.pem", "client.key")  # pgn_tf.serving.tls
    summaries = summarize("localhost:8500", "pgn", ["an article ..."], credentials=creds)
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.serving.client"))
import argparse
import json
import sys
import urllib.error
import urllib.request

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from pgn_tf.saved_model.contract import ARTICLES, SERVING_DEFAULT
from pgn_tf.serving import tls
from pgn_tf.utils.quiet import add_verbose_flag


def make_request(model_name: str, articles: list[str], signature: str = SERVING_DEFAULT,
                 version: int | None = None) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[ARTICLES].CopyFrom(
        tf.make_tensor_proto([a.encode("utf-8") for a in articles], dtype=tf.string))
    return request


def channel(server: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A gRPC channel to `server`: TLS with `credentials` (tls.channel_credentials), else
    plaintext."""
    options = [("grpc.max_send_message_length", 256 * 2**20),
               ("grpc.max_receive_message_length", 256 * 2**20)]
    if credentials is not None:
        return grpc.secure_channel(server, credentials, options=options)
    return grpc.insecure_channel(server, options=options)


def summarize(server: str, model_name: str, articles: list[str], signature: str = SERVING_DEFAULT,
              version: int | None = None, timeout: float = 60.0,
              credentials: grpc.ChannelCredentials | None = None) -> list[str]:
    """Summaries of `articles` over gRPC (over TLS when `credentials` are given)."""
    request = make_request(model_name, articles, signature, version)
    with channel(server, credentials) as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        response = stub.Predict(request, timeout=timeout)
    return [s.decode("utf-8", "replace") for s in tf.make_ndarray(response.outputs["summaries"])]


def summarize_rest(server: str, model_name: str, articles: list[str],
                   signature: str = SERVING_DEFAULT, version: int | None = None,
                   timeout: float = 60.0) -> list[str]:
    """Summaries of `articles` over REST (`instances` row format)."""
    path = f"/v1/models/{model_name}" + (f"/versions/{version}" if version else "") + ":predict"
    body = json.dumps({"signature_name": signature, "instances": articles}).encode()
    req = urllib.request.Request(f"http://{server}{path}", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            preds = json.loads(r.read())["predictions"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.read().decode('utf-8', 'replace')}") from None
    return [p["summaries"] if isinstance(p, dict) else p for p in preds]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.serving.client",
                                description=__doc__.splitlines()[0])
    p.add_argument("text", nargs="?", help="the article, or - (default) for standard input")
    p.add_argument("--server", default="localhost:8500")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--signature", default=SERVING_DEFAULT)
    p.add_argument("--version", type=int)
    p.add_argument("--rest", action="store_true",
                   help="use the REST API (server is host:rest_port)")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--ssl_ca", help="PEM file of the CA that signed the server's certificate: "
                                    "gRPC over TLS (default: plaintext)")
    p.add_argument("--ssl_cert", help="PEM file of this client's certificate (with --ssl_key), "
                                      "for a server whose SSLConfig sets client_verify")
    p.add_argument("--ssl_key", help="PEM file of this client's private key (with --ssl_cert)")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    tls_flags = args.ssl_ca or args.ssl_cert or args.ssl_key
    if args.rest and tls_flags:
        p.error("--ssl_ca, --ssl_cert and --ssl_key are for gRPC; the REST API is plaintext")
    if bool(args.ssl_cert) != bool(args.ssl_key):
        p.error("give both --ssl_cert and --ssl_key, or neither")
    text = sys.stdin.read() if args.text in (None, "-") else args.text
    try:
        if args.rest:
            out = summarize_rest(args.server, args.model_name, [text], args.signature,
                                 args.version, args.timeout)
        else:
            creds = tls.channel_credentials(args.ssl_ca, args.ssl_cert, args.ssl_key) \
                if tls_flags else None
            out = summarize(args.server, args.model_name, [text], args.signature, args.version,
                            args.timeout, credentials=creds)
    except grpc.RpcError as e:
        print(f"pgn_tf.serving.client: error: {e.code().name}: "
              f"{tls.without_key_material(e.details() or '')}", file=sys.stderr)
        return 1
    except (RuntimeError, OSError, ValueError) as e:  # ValueError: a bad --ssl_* file
        # the TLS files' messages never quote them; without_key_material guards the rest
        print(f"pgn_tf.serving.client: error: {tls.without_key_material(str(e))}",
              file=sys.stderr)
        return 1
    print(out[0])
    return 0
