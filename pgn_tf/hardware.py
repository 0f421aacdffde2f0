"""What the machine offers for speed: the CPU's flags, and the mixed-precision policy that
`train.mixed_precision = "auto"` resolves to on it."""

from __future__ import annotations

import functools

import tensorflow as tf

MIXED_PRECISION = ("", "auto", "mixed_bfloat16")


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


def has_bf16_matmul() -> bool:
    """Whether the device that trains multiplies bfloat16 natively: a GPU of compute capability
    8.0 or later (Ampere's bf16 tensor cores), or, without a GPU, a CPU with AVX512_BF16 or AMX.
    Elsewhere bf16 is emulated and mixed precision gains nothing (docs/performance.md)."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return tuple(details.get("compute_capability") or (0, 0)) >= (8, 0)
    return bool((cpu_flags() or frozenset()) & {"avx512_bf16", "amx_bf16"})


def mixed_precision_policy(setting: str) -> str:
    """The Keras dtype policy for `train.mixed_precision`: "" -> float32; "mixed_bfloat16" as
    given; "auto" -> mixed_bfloat16 where `has_bf16_matmul()`, else float32. bf16 keeps
    float32's exponent range, so no policy here needs loss scaling."""
    if setting not in MIXED_PRECISION:
        raise ValueError(f"unknown train.mixed_precision '{setting}' "
                         f"({', '.join(repr(m) for m in MIXED_PRECISION)})")
    if setting == "auto":
        return "mixed_bfloat16" if has_bf16_matmul() else "float32"
    return setting or "float32"
