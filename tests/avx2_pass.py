"""The suite's second pass: the numerics-bearing tests again as a CPU without bf16 would run
them, oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`: its AVX2 float32 kernels, and `auto`
precision resolving to float32), so that a machine with AVX-512 or AMX also checks the path most
rented CPUs take.

    python -m tests.avx2_pass [PYTEST_ARGS ...]

On a CPU whose highest instruction set oneDNN knows is AVX2 (an AMD Zen 2/3, an Intel before
Skylake-SP), the cap changes nothing: the first pass already ran these tests exactly so, and
this pass says why it does not repeat them. It runs wherever the CPU's flags cannot be read (a
repeat costs minutes; a skipped check could hide a failure)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from pgn_tf.utils import procfs

# The tests whose numerics depend on the CPU's kernels and the `auto` precision.
PATHS = ("tests/layers", "tests/ops", "tests/models", "tests/decoding",
         "tests/test_objectives.py", "tests/training/test_train.py",
         "tests/training/test_guard.py", "tests/training/test_precision_policies.py")
CAP = "AVX2"
# /proc/cpuinfo's flags of the instruction sets oneDNN ranks above AVX2
# (pgn_tf.training.hardware.ONEDNN_ISA_LEVELS): AVX2_VNNI (avx_vnni), AVX2_VNNI_2 (avx_ne_convert,
# avx_vnni_int8), AVX-512 and the AMX levels (avx512f, amx_tile).
ABOVE_CAP = frozenset({"avx_vnni", "avx_ne_convert", "avx_vnni_int8", "avx512f", "amx_tile"})


def why_not_needed(flags: frozenset[str] | None) -> str | None:
    """Why the capped pass would repeat the first one on a CPU with `flags` (/proc's; None:
    unknown), or None where it checks something the first pass did not."""
    if flags is None or flags & ABOVE_CAP:
        return None
    return (f"this CPU has no instruction set above {CAP} that oneDNN uses (none of "
            f"{', '.join(sorted(ABOVE_CAP))}): ONEDNN_MAX_CPU_ISA={CAP} changes nothing here, "
            f"and the first pytest already ran these tests as a CPU without bf16 does")


def run(paths: Sequence[str] = PATHS, pytest_args: Sequence[str] = (),
        flags: frozenset[str] | None = None) -> int:
    """pytest's exit status over `paths` under the cap (0, with the reason printed, where the
    cap would change nothing on a CPU with `flags`)."""
    reason = why_not_needed(flags)
    if reason:
        print(f"AVX2 pass not repeated: {reason}.", flush=True)
        return 0
    print(f"AVX2 pass: ONEDNN_MAX_CPU_ISA={CAP} python -m pytest -q {' '.join(paths)}",
          flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", *paths, *pytest_args],
                           env=dict(os.environ, ONEDNN_MAX_CPU_ISA=CAP))


def main(argv: Sequence[str] | None = None) -> int:
    return run(PATHS, list(sys.argv[1:] if argv is None else argv), procfs.cpu_flags())


if __name__ == "__main__":
    sys.exit(main())
