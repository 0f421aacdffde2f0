"""Collects the JSON line of each run in door_2026-12-02 into figures.json."""
import json, os, sys
R = os.path.dirname(os.path.abspath(__file__))
out = {"date": "2026-12-02", "code": "9cbaf5a", "cpu_flags": "avx2 avx512f avx512_bf16",
       "record": "docs/records/2026-12-02-server-door.md", "runs": {}}
for name in ("stalled_grpc", "trickle_rest", "soak", "fuzz_http", "fuzz_grpc_wire", "fuzz_model"):
    path = os.path.join(R, name + ".txt")
    if not os.path.exists(path):
        continue
    lines = [l for l in open(path) if l.startswith("{")]
    if lines:
        out["runs"][name] = json.loads(lines[-1])
json.dump(out, open(os.path.join(R, "figures.json"), "w"), indent=1, sort_keys=True)
print(sorted(out["runs"]))
