"""Two checkouts of this project measured against each other: `compare_peer --skip_peer` run
alternately in each, so a change (a refactor, a speed lever) is judged by a ratio taken on the
same machine at the same time, not by two figures from two runs.

    python -m benchmarks.ab_rounds --before BEFORE_CHECKOUT --after AFTER_CHECKOUT \
        [--rounds 6] [--work_dir runs/ab_rounds] [--after_set SECTION.KEY=VALUE ...] \
        -- COMPARE_PEER_ARGS...

--after_set (repeatable) gives the after side's runs one more `--set`: a switch measured against
the default in one checkout (--before and --after the same directory).

Each round runs both checkouts once, in ABBA order (before first in even rounds, after first in
odd ones), so drift on a noisy machine falls on both sides alike. Every run is a fresh process
started from its checkout's root, where `python -m` finds that checkout's `pgn_tf` and
`benchmarks` first; the decoding model is shared (one --work_dir), so both decode the same
weights. The figures are compare_peer's own: training source tokens/s and decoding articles/s.
Printed: each round's figures and after/before ratios, the medians, the CPU's vector flags, and
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.common import cpu_flags, result_line
from pgn_tf.utils.errors import UserError, run_cli

FIGURES = {"training source tokens/s": ("training", "src_tokens_per_sec"),
           "decoding articles/s": ("decoding", "articles_per_sec")}


def figures_of(output: str) -> dict[str, float]:
    """The figures of compare_peer's JSON line in a run's output; UserError when none."""
    for line in reversed(output.splitlines()):
        if line.startswith("{") and '"benchmark": "compare_peer"' in line:
            mine = json.loads(line)["pgn_tf"]
            return {name: float(mine[part][key]) for name, (part, key) in FIGURES.items()
                    if key in mine.get(part, {})}
    raise UserError("a compare_peer run printed no result line; its last lines:\n"
                    + "\n".join(output.splitlines()[-20:]))


def run_once(checkout: str, args: list[str], work_dir: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.compare_peer", "--skip_peer",
           "--work_dir", os.path.abspath(work_dir), *args]
    proc = subprocess.run(cmd, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env={**os.environ, "PYTHONPATH": checkout})
    if proc.returncode:
        raise UserError(f"compare_peer in {checkout} exited with {proc.returncode}:\n"
                        + "\n".join(proc.stdout.splitlines()[-20:]))
    return figures_of(proc.stdout)


def rounds(before: str, after: str, n: int, args: list[str], work_dir: str,
           after_set: list[str] = ()) -> dict:
    """n rounds of both checkouts in ABBA order -> each round's figures, ratios and medians;
    after_set: overrides the after side's runs add (`--set` each)."""
    per_round = []
    extra = {"before": [], "after": [x for item in after_set for x in ("--set", item)]}
    for i in range(n):
        order = [("before", before), ("after", after)][:: 1 if i % 2 == 0 else -1]
        got = {}
        for side, checkout in order:
            print(f"== round {i + 1}/{n}: {side} ({checkout}) {' '.join(extra[side])}",
                  flush=True)
            got[side] = run_once(checkout, args + extra[side], work_dir)
        ratio = {k: round(got["after"][k] / got["before"][k], 4)
                 for k in got["before"] if got["after"].get(k)}
        per_round.append({**got, "ratio": ratio})
        print(f"   {json.dumps(got)} ratio {json.dumps(ratio)}", flush=True)
    medians = {k: round(statistics.median(r["ratio"][k] for r in per_round), 4)
               for k in per_round[0]["ratio"]}
    return {"rounds": per_round, "median_ratio": medians}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab_rounds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the checkout measured as the base")
    p.add_argument("--after", required=True, help="the checkout measured against it")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--work_dir", default="runs/ab_rounds", help="compare_peer's --work_dir, "
                   "shared by both sides (its decoding model is trained once)")
    p.add_argument("--after_set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="a --set the after side's runs add (repeatable)")
    p.add_argument("compare_peer_args", nargs=argparse.REMAINDER,
                   help="after --: compare_peer's arguments (--data_dir ... at least)")
    return p


def run(a) -> dict:
    for side in (a.before, a.after):
        if not os.path.isfile(os.path.join(side, "benchmarks", "compare_peer.py")):
            raise UserError(f"{side} is not a checkout of this project (no "
                            "benchmarks/compare_peer.py)")
    args = [x for x in a.compare_peer_args if x != "--"]
    result = rounds(os.path.abspath(a.before), os.path.abspath(a.after), a.rounds, args,
                    a.work_dir, a.after_set)
    for k, v in result["median_ratio"].items():
        print(f"median after/before, {k}: {v:.3f} over {a.rounds} rounds")
    print(f"cpu_flags: {cpu_flags()}")
    print(result_line("ab_rounds", {"before": a.before, "after": a.after,
                                    "after_set": a.after_set, **result}), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    return run_cli("ab_rounds", run, a)


if __name__ == "__main__":
    sys.exit(main())
