"""TensorFlow's oneDNN CPU kernels for the commands, on every x86-64 CPU.

TensorFlow turns its oneDNN kernels on by default only on x86 CPUs with the neural-network
extensions (AVX512_VNNI, AVX512_BF16, AMX); on a CPU with AVX2 only (AMD Zen 2 and 3, Intel
before Cascade Lake: many rented machines) it leaves them off and runs its Eigen kernels. On
one such CPU, this project's float32 training step and beam search ran faster with oneDNN on,
in interleaved runs of each (research/records/2026-11-29-real-avx2-cpu-and-onednn.md), the same
kernels every AVX-512 machine already runs.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it loads, so the commands set it before
anything imports TensorFlow (pgn_tf.commands.run_command calls start()), and only where the
user has not: TF_ENABLE_ONEDNN_OPTS=0 still turns it off. Importing this module changes
nothing; a library user's own process (a notebook, a service) keeps TensorFlow's default unless
it sets the variable itself (README: speed).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# platform.machine() of the CPUs whose TensorFlow builds carry oneDNN's x86 kernels.
X86_64 = ("x86_64", "amd64")


def environment(env: Mapping[str, str], machine: str) -> dict[str, str]:
    """`env` with TF_ENABLE_ONEDNN_OPTS=1 where it leaves the variable unset and `machine`
    (platform.machine()) is x86-64; otherwise `env` as it is (a user's setting, any value, is
    kept; other CPUs keep TensorFlow's own default)."""
    out = dict(env)
    if VARIABLE not in out and machine.lower() in X86_64:
        out[VARIABLE] = "1"
    return out


def start() -> bool:
    """Sets environment()'s value in this process where TensorFlow has not loaded yet (after,
    the variable would change nothing here and mislead the processes it starts). Returns
    whether it set anything. Calling it again changes nothing more."""
    if "tensorflow" in sys.modules:
        return False
    wanted = environment(os.environ, platform.machine())
    if wanted.get(VARIABLE) == os.environ.get(VARIABLE):
        return False
    os.environ[VARIABLE] = wanted[VARIABLE]
    return True


def state(env: Mapping[str, str] | None = None) -> str:
    """TensorFlow's oneDNN setting in `env` (default this process's), as a benchmark records
    it: "on (TF_ENABLE_ONEDNN_OPTS=1)", "off (...=0)" or "TensorFlow's default (unset)"."""
    env = os.environ if env is None else env
    value = env.get(VARIABLE)
    if value is None:
        return "TensorFlow's default (unset)"
    word = {"1": "on", "true": "on", "0": "off", "false": "off"}.get(value.strip().lower(),
                                                                     "TensorFlow's default")
    return f"{word} ({VARIABLE}={value})"
