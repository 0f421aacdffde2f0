"""Collects the JSON line each run of this folder printed into figures.json (the record's
figures as data)."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = ("stalled_grpc", "trickle_rest", "soak", "fuzz_http", "fuzz_grpc_wire", "fuzz_model")


def main() -> None:
    out = {"date": "2026-12-02", "code": "9cbaf5a", "cpu_flags": "avx2 avx512f avx512_bf16",
           "record": "research/records/2026-12-02-server-door.md", "runs": {}}
    for name in RUNS:
        path = os.path.join(HERE, name + ".txt")
        if os.path.exists(path):
            lines = [line for line in open(path) if line.startswith("{")]
            if lines:
                out["runs"][name] = json.loads(lines[-1])
    with open(os.path.join(HERE, "figures.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(sorted(out["runs"]))


if __name__ == "__main__":
    main()
