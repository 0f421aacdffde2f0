"""Fuzzing campaigns over the server: coverage-guided (atheris, libFuzzer) inputs through the
request decoders (gRPC handlers and the REST application: tools.fuzz.fuzz), and through a
running server on loopback: raw bytes into the REST server's waitress channel (http), HTTP/2
streams into the gRPC server (grpc_wire), and the real model's signatures through both (model).

    python -m tools.fuzz.fuzz_decoders --target grpc|rest|all --runs 1000000 --seed S --out DIR
    python -m tools.fuzz.fuzz_decoders --target http --runs 1000000 --out DIR
    python -m tools.fuzz.fuzz_decoders --target grpc_wire --runs 1000000 --out DIR
    python -m tools.fuzz.fuzz_decoders --target model --runs 100000 --out DIR [--model_base_path B]
    python -m tools.fuzz.fuzz_decoders --target http,grpc_wire,model --runs 1000000,1000000,100000 --out DIR

Several targets run one after the other, each with its own input count (one --runs for all, or
one a target). `all` fuzzes the gRPC and REST decoders in one campaign (a gRPC input may become
a REST one). The corpus libFuzzer keeps stays in DIR/corpus-TARGET, so a second campaign on the
same DIR starts where the first stopped; reproducers go to DIR/artifacts/. Prints, for each
campaign: the inputs run and inputs/s, libFuzzer's coverage at the end (cov: Python branches of
the serving modules, and waitress' for REST, ft: features), the corpus' growth, the share of
inputs that reached each stage (transport campaigns: a request parsed out of the transport, its
inputs decoded to tensors, a model run) or the accepted and refused requests (decoder
campaigns), whether it finished (all inputs, exit 0), the crashes, timeouts and out-of-memory
inputs found (their reproducer files), the CPU's vector flags, and a JSON line. A campaign
stops after --max_total_time seconds (6 hours) if its inputs are not done by then. Exits 1 when
a campaign found anything or did not finish.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.common import code_version, emit
from tools.fuzz import fuzz, fuzz_harness


def run(target: str, runs: int, seed: int, out: str, timeout_s: int, max_len: int,
        model_base_path: str | None = None, max_total_time_s: int = 0) -> dict:
    result = fuzz.run_campaign(target, runs, seed, out, timeout_s=timeout_s, max_len=max_len,
                               model_base_path=model_base_path,
                               max_total_time_s=max_total_time_s)
    summary = result.summary()
    summary["outcomes"] = dict(sorted(result.outcomes.items()))
    summary["code"] = code_version()
    return summary


def _targets(text: str) -> list[str]:
    out = [t.strip() for t in text.split(",") if t.strip()]
    for t in out:
        if t not in fuzz_harness.CAMPAIGNS:
            raise argparse.ArgumentTypeError(
                f"unknown target '{t}' ({', '.join(fuzz_harness.CAMPAIGNS)})")
    return out


def _counts(text: str) -> list[int]:
    try:
        out = [int(n.replace("_", "")) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--runs takes counts, comma-separated: {text}") from None
    if any(n <= 0 for n in out):
        raise argparse.ArgumentTypeError(f"--runs must be positive: {text}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz.fuzz_decoders",
                                description=__doc__.splitlines()[0])
    p.add_argument("--target", type=_targets, default=["all"],
                   help=f"campaigns, comma-separated ({', '.join(fuzz_harness.CAMPAIGNS)})")
    p.add_argument("--runs", type=_counts, default=[1_000_000],
                   help="inputs of each campaign: one count, or one a target")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="the campaigns' dir (corpus, reproducers, log)")
    p.add_argument("--timeout_s", type=int, default=30, help="seconds one input may take")
    p.add_argument("--max_len", type=int, default=8192, help="the longest input in bytes")
    p.add_argument("--model_base_path", help="the model campaign serves this export "
                   "(BASE/pgn/N, e.g. the quickstart's, exported) instead of a fresh tiny model")
    p.add_argument("--max_total_time", type=int, default=6 * 3600,
                   help="libFuzzer's: seconds a campaign may fuzz before it stops unfinished "
                   "(0: no limit)")
    args = p.parse_args(argv)
    runs = args.runs * len(args.target) if len(args.runs) == 1 else args.runs
    if len(runs) != len(args.target):
        p.error(f"--runs gives {len(runs)} counts for {len(args.target)} targets")
    failed = False
    for target, n in zip(args.target, runs):
        summary = run(target, n, args.seed, args.out, args.timeout_s, args.max_len,
                      args.model_base_path, args.max_total_time)
        emit("fuzz_decoders", summary)
        failed |= not summary["ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
