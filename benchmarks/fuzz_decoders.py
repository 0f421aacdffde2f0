"""A fuzzing campaign over the server's request decoders: coverage-guided (atheris, libFuzzer)
inputs through the gRPC handlers and the REST application, into the signatures' tensors
(pgn_tf.serving.fuzz says what is covered and what counts as a finding).

    python -m benchmarks.fuzz_decoders --target grpc|rest|all --runs 1000000 --seed S --out DIR

`all` fuzzes the gRPC and REST methods in one campaign (one child process; a gRPC input may
become a REST one). The corpus libFuzzer keeps stays in DIR/corpus-TARGET, so a second campaign
on the same DIR starts where the first stopped; reproducers go to DIR/artifacts/. Prints the
inputs run and inputs/s, libFuzzer's coverage (cov: Python branches of the serving modules, ft:
features), the corpus' growth, the accepted and refused requests of each kind, the crashes,
timeouts and out-of-memory inputs found (their reproducer files), the CPU's vector flags, and a
JSON line. Exits 1 when the campaign found anything.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.common import code_version, emit
from pgn_tf.serving import fuzz, fuzz_harness


def run(target: str, runs: int, seed: int, out: str, timeout_s: int, max_len: int) -> dict:
    result = fuzz.run_campaign(target, runs, seed, out, timeout_s=timeout_s, max_len=max_len)
    summary = result.summary()
    summary["outcomes"] = dict(sorted(result.outcomes.items()))
    summary["code"] = code_version()
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_decoders",
                                description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=sorted(fuzz_harness.TARGETS), default="all")
    p.add_argument("--runs", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="the campaign's dir (corpus, reproducers, log)")
    p.add_argument("--timeout_s", type=int, default=30, help="seconds one input may take")
    p.add_argument("--max_len", type=int, default=8192, help="the longest input in bytes")
    args = p.parse_args(argv)
    summary = run(args.target, args.runs, args.seed, args.out, args.timeout_s, args.max_len)
    emit("fuzz_decoders", summary)
    found = summary["crashes"] or summary["timeouts"] or summary["ooms"]
    return 1 if found or summary["returncode"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
