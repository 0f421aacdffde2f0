"""Serving load: requests/s, p50/p99 latency and peak RSS of serving.server over gRPC, with and
without batching, and of the reference system's own server in the same run.

    python -m benchmarks.serve_load --model_base_path EXPORT_BASE/NAME [--model_name pgn] \
        [--concurrency 1 16 64] [--seconds 20] [--data validation.jsonl.gz] \
        [--max_batch_size 16] [--batch_timeout_micros 20000] [--num_batch_threads 1] \
        [--peer_work PEER_WORK [--peer_model MODEL.pt] [--peer_src_tokens 100]] \
        [--forced_length N] [--arms unbatched batched reference] [--cpu native|avx2]

Arms, each a fresh server process on loopback, in this order: pgn_tf's server unbatched,
batched (`--enable_batching` with the given parameters), and with --peer_work the reference's
REST server (`onmt_server` of OpenNMT-py 3.5.1, benchmarks/peer_server.py: its model the newest
PEER_WORK/run/model_step_N.pt unless --peer_model, beam 4, the articles tokenized and cut as
the peer's setup cuts them). Each concurrency level runs --seconds with one article per
request from that many clients, each on its own connection (gRPC for pgn_tf, keep-alive HTTP
for the reference), counting failures. Peak RSS is the server process' VmHWM at the arm's end
(pgn_tf.utils.procfs), start-up and model load included.

--forced_length N makes the work equal: the reference decodes with min and max length N, and
the export must decode exactly N tokens itself (its decoding is fixed in its graph: export with
`--set decode.min_dec_steps=N --set decode.max_dec_steps=N`); another export is refused. The
export's decoding settings (beam, lengths, shortlist) are printed with the figures.

Prints each row as it is measured, a table with the ratios at the end (requests/s over the
unbatched arm's and over the reference's at the same concurrency), the CPU's vector flags, and
one JSON line. Bounded in time and count; it only talks to 127.0.0.1. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from benchmarks import peer_server
from benchmarks.common import (
    add_cpu_flag,
    articles_from,
    cpu_flags,
    emulate_cpu,
    percentiles,
    result_line,
)
from pgn_tf.serving.client import make_request, summarize
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.utils import procfs
from pgn_tf.utils.errors import UserError, run_cli

ARMS = ("unbatched", "batched", "reference")
PEER_BEAM = 4


def load(make_client: Callable[[], tuple[Callable[[str], object], Callable[[], None]]],
         articles: list[str], concurrency: int, seconds: float) -> dict:
    """`concurrency` clients, each from make_client() -> (send(article), close()), sending one
    article a request for `seconds`; a send that raises counts as a failure."""
    latencies, failures = [], []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(k: int) -> None:
        i = k
        send, close = make_client()
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                send(articles[i % len(articles)])
                with lock:
                    latencies.append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001  (every failure is counted, by its kind)
                with lock:
                    failures.append(type(e).__name__)
            i += concurrency
        close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"requests": len(latencies), "failures": len(failures),
            "failure_kinds": sorted(set(failures)),
            "requests_per_sec": round(len(latencies) / wall, 2), **percentiles(latencies)}


def grpc_clients(port: int, model: str):
    def make():
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")  # one connection per client
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return (lambda article: stub.Predict(make_request(model, [article]), timeout=120),
                channel.close)
    return make


def peer_clients(port: int, src_tokens: int):
    def make():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        return (lambda article: peer_server.translate(
            port, [peer_server.peer_tokens(article, src_tokens)], conn=conn), conn.close)
    return make


def export_decoding(base_path: str) -> dict:
    """The newest version's decoding settings under `base_path` (its assets.extra/config.json);
    UserError when it has none."""
    versions = sorted((int(v) for v in os.listdir(base_path) if v.isdigit()), reverse=True) \
        if os.path.isdir(base_path) else []
    if not versions:
        raise UserError(f"--model_base_path {base_path} holds no numbered version")
    path = os.path.join(base_path, str(versions[0]), "assets.extra", "config.json")
    try:
        with open(path) as f:
            d = json.load(f)["decode"]
    except (OSError, ValueError, KeyError):
        raise UserError(f"{path} is missing or unreadable: export with python -m "
                        f"pgn_tf.export") from None
    return {"version": versions[0], **{k: d.get(k) for k in (
        "beam_size", "min_dec_steps", "max_dec_steps", "fixed_length", "shortlist",
        "block_trigrams", "block_repeated_words")}}


def check_forced(decoding: dict, n: int) -> None:
    exact = decoding.get("fixed_length") == n or (
        decoding.get("min_dec_steps") == n == decoding.get("max_dec_steps"))
    if not exact:
        raise UserError(
            f"--forced_length {n}: the export decodes {decoding.get('min_dec_steps')}-"
            f"{decoding.get('max_dec_steps')} tokens (fixed_length "
            f"{decoding.get('fixed_length')}); export it with --set decode.min_dec_steps={n} "
            f"--set decode.max_dec_steps={n}, or leave --forced_length out")


def batching_file(a, work_dir: str) -> str:
    path = os.path.join(work_dir, "batching.config")
    with open(path, "w") as f:
        f.write(f"max_batch_size {{ value: {a.max_batch_size} }}\n"
                f"batch_timeout_micros {{ value: {a.batch_timeout_micros} }}\n"
                "max_enqueued_batches { value: 64 }\n"
                f"num_batch_threads {{ value: {a.num_batch_threads} }}\n")
    return path


def run_arm(arm: str, a, articles: list[str], work_dir: str) -> list[dict]:
    """Every concurrency level of one arm, in a fresh server; its rows."""
    if arm == "reference":
        model = a.peer_model or peer_server.newest_model(a.peer_work)
        conf = os.path.join(work_dir, "onmt_conf.json")
        n = a.forced_length
        peer_server.write_config(conf, model, PEER_BEAM, n or 0, n or a.peer_max_length)
        proc, port = peer_server.start(a.peer_work, conf, work_dir)
        make, what = peer_clients(port, a.peer_src_tokens), model
        first = lambda: peer_server.translate(  # noqa: E731
            port, [peer_server.peer_tokens(articles[0], a.peer_src_tokens)])[0]
    else:
        extra = (["--enable_batching", "--batching_parameters_file", batching_file(a, work_dir)]
                 if arm == "batched" else [])
        proc, port, _ = start_server(a.model_base_path, a.model_name, extra)
        make, what = grpc_clients(port, a.model_name), a.model_base_path
        first = lambda: summarize(  # noqa: E731  (and the warm-up)
            f"127.0.0.1:{port}", a.model_name, articles[:1])[0]
    rows = []
    try:
        sample = first()  # the first article's summary: its length shows each request's work
        print(f"   {arm}'s summary of the first article ({len(sample.split())} tokens): "
              f"{sample[:200]}", flush=True)
        for c in a.concurrency:
            res = load(make, articles, c, a.seconds)
            rows.append({"arm": arm, "concurrency": c, **res, "seconds": a.seconds,
                         "peak_rss_mib": procfs.peak_mib(proc.pid), "serving": what,
                         "sample_summary_tokens": len(sample.split())})
            print(f"   {arm} at {c} clients: {res['requests_per_sec']} requests/s, p50 "
                  f"{res['p50_ms']} ms, p99 {res['p99_ms']} ms, {res['failures']} failures, "
                  f"peak RSS {rows[-1]['peak_rss_mib']} MiB", flush=True)
    finally:
        stop_server(proc)
    return rows


def table(rows: list[dict]) -> str:
    """One line a row: requests/s, latencies, peak RSS, and its requests/s over the unbatched
    arm's and the reference's at the same concurrency."""
    by = {(r["arm"], r["concurrency"]): r for r in rows}
    lines = ["| arm | clients | requests/s | p50 ms | p99 ms | failures | peak RSS MiB | "
             "x unbatched | x reference |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = []
        for other in ("unbatched", "reference"):
            o = by.get((other, r["concurrency"]))
            ratio.append(f"{r['requests_per_sec'] / o['requests_per_sec']:.2f}"
                         if o and o["requests_per_sec"] and other != r["arm"] else "")
        lines.append(f"| {r['arm']} | {r['concurrency']} | {r['requests_per_sec']} | "
                     f"{r['p50_ms']} | {r['p99_ms']} | {r['failures']} | {r['peak_rss_mib']} | "
                     f"{ratio[0]} | {ratio[1]} |")
    return "\n".join(lines)


def run(a) -> dict:
    arms = a.arms or [x for x in ARMS if x != "reference" or a.peer_work]
    if "reference" in arms and not a.peer_work:
        raise UserError("the reference arm needs --peer_work (the peer's bench.sh work dir)")
    decoding = export_decoding(a.model_base_path) if set(arms) - {"reference"} else {}
    if a.forced_length and decoding:
        check_forced(decoding, a.forced_length)
    articles = articles_from(a.data, 200)
    rows = []
    with tempfile.TemporaryDirectory(prefix="serve_load-") as work_dir:
        for arm in arms:
            print(f"== {arm}", flush=True)
            rows.extend(run_arm(arm, a, articles, work_dir))
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print("\n" + table(rows))
    print(f"pgn_tf's export decodes: {decoding}")
    print(f"batching: max_batch_size {a.max_batch_size}, batch_timeout_micros "
          f"{a.batch_timeout_micros}, num_batch_threads {a.num_batch_threads}")
    print(f"cpu_flags: {cpu_flags()}")
    print(f"date: {date}")
    result = {"date": date, "cpu": a.cpu, "forced_length": a.forced_length,
              "export_decoding": decoding, "rows": rows,
              "batching": {"max_batch_size": a.max_batch_size,
                           "batch_timeout_micros": a.batch_timeout_micros,
                           "num_batch_threads": a.num_batch_threads}}
    print(result_line("serve_load", result), flush=True)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_base_path", help="EXPORT_BASE/NAME (python -m pgn_tf.export)")
    p.add_argument("--model_name", default="pgn")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--data", help="articles to send (any pgn_tf data path; default synthetic)")
    p.add_argument("--max_batch_size", type=int, default=16)
    p.add_argument("--batch_timeout_micros", type=int, default=20000)
    p.add_argument("--num_batch_threads", type=int, default=1,
                   help="batches run at once (TF Serving's advice: the number of cores)")
    p.add_argument("--arms", nargs="+", choices=ARMS,
                   help="which servers (default: both of pgn_tf's, and the reference's with "
                        "--peer_work)")
    p.add_argument("--peer_work", help="the peer's bench.sh work dir (its venv and models)")
    p.add_argument("--peer_model", help="the reference's model (default: the newest "
                                        "PEER_WORK/run/model_step_N.pt)")
    p.add_argument("--peer_src_tokens", type=int, default=100,
                   help="the article tokens the reference reads (its setup's cut)")
    p.add_argument("--peer_max_length", type=int, default=30,
                   help="the reference's longest summary without --forced_length")
    p.add_argument("--forced_length", type=int, metavar="N",
                   help="every summary exactly N tokens in both systems (equal work)")
    add_cpu_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    emulate_cpu(a.cpu, "benchmarks.serve_load", sys.argv[1:] if argv is None else argv)
    if not a.model_base_path and (not a.arms or set(a.arms) - {"reference"}):
        p.error("--model_base_path is required unless --arms reference")
    if a.seconds <= 0 or min(a.concurrency) < 1 or (a.forced_length is not None
                                                    and a.forced_length < 1):
        p.error("--seconds, --concurrency and --forced_length must be positive")
    return run_cli("serve_load", run, a)


if __name__ == "__main__":
    sys.exit(main())
