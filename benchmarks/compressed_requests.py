"""What a compressed request costs the server before it is refused: peak RSS growth of a served
export under N concurrent requests that inflate far past --max_request_bytes.

    python -m benchmarks.compressed_requests --model_base_path runs/quickstart/export/pgn \
        [--max_request_bytes 10485760] [--concurrent 8] [--inflate 6]

A fresh server process (with serving/batching.config) serves the newest version under
--model_base_path. Each case sends --concurrent requests at once and reads the server's peak
RSS (VmHWM, reset to the current RSS before each case) from /proc:

- grpc_gzip_bomb: gRPC Predict requests compressed with gzip whose `articles` inflate to
  --inflate x --max_request_bytes (a few hundred KB on the wire);
- rest_gzip_bomb: REST bodies with `Content-Encoding: gzip` that inflate to the same;
- grpc_at_cap: uncompressed requests one byte over --max_request_bytes, which gRPC receives and
  the server parses and refuses (what an allowed-size message costs: the reference);
- rest_at_cap: uncompressed REST bodies at the body cap (twice --max_request_bytes) of one
  string just over --max_request_bytes.

Every request of every case must be refused (RESOURCE_EXHAUSTED or INVALID_ARGUMENT; HTTP 400
or 413), and a well-formed request answered after each case. Prints each case's codes and peak
RSS growth in MB beside 8 x --max_request_bytes, the CPU's vector flags, and a JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import sys
import threading

import grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from benchmarks.common import emit
from pgn_tf.serving import client
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.utils.procfs import memory_mb, reset_peak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTICLE = "the council said on monday that the bridge near the station would be repaired ."


def concurrently(fn, n: int) -> list:
    """Runs fn(i) on n threads that start together; their results in order."""
    results = [None] * n
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def grpc_call(port: int, request, compressed: bool) -> str:
    """The status code name of one Predict call."""
    with grpc.insecure_channel(f"127.0.0.1:{port}",
                               options=[("grpc.max_send_message_length", -1)],
                               compression=grpc.Compression.Gzip if compressed else None) as ch:
        try:
            prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(request, timeout=120)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name


def rest_call(port: int, body: bytes, encoding: str | None) -> int:
    """The HTTP status of one POST :predict."""
    headers = {"Content-Type": "application/json"}
    if encoding:
        headers["Content-Encoding"] = encoding
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/models/pgn:predict", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (ConnectionError, OSError):  # a 413 may close the connection before the body is sent
        return 413
    finally:
        conn.close()


def measure(pid: int, fn, n: int) -> dict:
    """Peak RSS growth (MB) of the server over n concurrent calls of fn, and their answers."""
    reset_peak(pid)
    before = memory_mb(pid)
    answers = concurrently(fn, n)
    after = memory_mb(pid)
    codes: dict = {}
    for a in answers:
        codes[str(a)] = codes.get(str(a), 0) + 1
    return {"peak_growth_mb": round(after["peak_rss_mb"] - before["rss_mb"], 1), "codes": codes}


def well_formed(grpc_port: int, rest_port: int) -> None:
    assert client.summarize(f"127.0.0.1:{grpc_port}", "pgn", [ARTICLE], timeout=60)[0]
    assert client.summarize_rest(f"127.0.0.1:{rest_port}", "pgn", [ARTICLE], timeout=60)[0]


def run(model_base_path: str, max_request_bytes: int, concurrent: int, inflate: float) -> dict:
    """The cases of the module docstring; {case: {"peak_growth_mb", "codes"}} and the limits."""
    proc, grpc_port, rest_port = start_server(
        model_base_path, "pgn",
        ["--enable_batching", "--batching_parameters_file",
         os.path.join(ROOT, "serving", "batching.config"),
         "--max_request_bytes", str(max_request_bytes)])
    try:
        if not reset_peak(proc.pid):
            raise RuntimeError("cannot reset the server's peak RSS (/proc/PID/clear_refs)")
        well_formed(grpc_port, rest_port)
        bomb = "a" * int(inflate * max_request_bytes)
        at_cap = "a" * (max_request_bytes + 1)
        bomb_request = client.make_request("pgn", [bomb])
        cap_request = client.make_request("pgn", [at_cap])
        bomb_body = gzip.compress(json.dumps({"instances": [bomb]}).encode(), 6)
        cap_body = json.dumps({"instances": [at_cap]}).encode()
        cases = {
            "grpc_gzip_bomb": lambda i: grpc_call(grpc_port, bomb_request, True),
            "rest_gzip_bomb": lambda i: rest_call(rest_port, bomb_body, "gzip"),
            "grpc_at_cap": lambda i: grpc_call(grpc_port, cap_request, False),
            "rest_at_cap": lambda i: rest_call(rest_port, cap_body, None),
        }
        out = {}
        for name, fn in cases.items():
            out[name] = measure(proc.pid, fn, concurrent)
            refused = {"RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "400", "413"}
            if set(out[name]["codes"]) - refused:
                raise RuntimeError(f"{name}: a request was not refused: {out[name]['codes']}")
            well_formed(grpc_port, rest_port)
            print(f"{name}: {out[name]}", flush=True)
        out["wire_bytes"] = {"grpc_gzip_bomb": len(gzip.compress(bomb_request.SerializeToString(),
                                                                 6)),
                             "rest_gzip_bomb": len(bomb_body)}
        out["inflated_bytes"] = len(bomb)
    finally:
        stop_server(proc)
    out.update(max_request_bytes=max_request_bytes, concurrent=concurrent,
               bound_mb=round(concurrent * max_request_bytes / 2**20, 1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compressed_requests",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", required=True, help="BASE/NAME of a pgn_tf export")
    p.add_argument("--max_request_bytes", type=int, default=10 * 2**20)
    p.add_argument("--concurrent", type=int, default=8)
    p.add_argument("--inflate", type=float, default=6.0,
                   help="a bomb inflates to this many times --max_request_bytes")
    args = p.parse_args(argv)
    emit("compressed_requests", run(args.model_base_path, args.max_request_bytes,
                                    args.concurrent, args.inflate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
