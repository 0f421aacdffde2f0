"""What the machine offers for speed: the CPU's flags, the GPUs, and the mixed-precision policy
that `train.mixed_precision = "auto"` resolves to on them (`choose_policy`, a pure function of
the device list, so every machine's choice is tested on any machine)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import tensorflow as tf

MIXED_PRECISION = ("", "auto", "mixed_bfloat16", "mixed_float16")
# float16 tensor cores from Volta (7.0) on: Keras's guidance for where mixed precision pays.
FLOAT16_COMPUTE_CAPABILITY = (7, 0)


@functools.cache
def cpu_flags() -> frozenset[str] | None:
    """The flags of the first CPU in /proc/cpuinfo; None where they cannot be read (macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def gpu_capabilities() -> list[tuple[int, int]]:
    """The compute capability of each visible GPU ((0, 0) where TF does not report one)."""
    return [tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability")
                  or (0, 0)) for gpu in tf.config.list_physical_devices("GPU")]


def choose_policy(setting: str, gpus: Sequence[tuple[int, int]],
                  flags: frozenset[str] | None) -> str:
    """The Keras dtype policy for `train.mixed_precision` = setting on a machine with GPUs of
    compute capabilities `gpus` (empty: none) and CPU flags `flags` (None: unknown).

    "" -> float32; "mixed_bfloat16" and "mixed_float16" as given; "auto" -> with a GPU (it
    trains), mixed_float16 from compute capability 7.0 (float16 tensor cores; bf16 would need
    8.0), with Keras's dynamic loss scaling (`needs_loss_scaling`), else float32; without one,
    mixed_bfloat16 on a CPU that multiplies bf16 natively (AVX512_BF16 or AMX), else float32
    (emulated bf16 gains nothing, docs/performance.md). The GPU choice is Keras's recipe for
    GPUs; its speed was not measured here (no GPU at hand)."""
    if setting not in MIXED_PRECISION:
        raise ValueError(f"unknown train.mixed_precision '{setting}' "
                         f"({', '.join(repr(m) for m in MIXED_PRECISION)})")
    if setting != "auto":
        return setting or "float32"
    if gpus:
        return ("mixed_float16" if min(gpus) >= FLOAT16_COMPUTE_CAPABILITY else "float32")
    return "mixed_bfloat16" if (flags or frozenset()) & {"avx512_bf16", "amx_bf16"} else "float32"


def mixed_precision_policy(setting: str) -> str:
    """choose_policy on this machine's GPUs and CPU flags."""
    return choose_policy(setting, gpu_capabilities(), cpu_flags())


def needs_loss_scaling(policy: str) -> bool:
    """Whether training under `policy` scales its loss (float16: gradients below its 6e-8
    underflow to zero); bf16 keeps float32's exponent range and needs none."""
    return policy == "mixed_float16"
