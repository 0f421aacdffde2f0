"""What the machine offers for speed: the CPU's vector flags and the mixed-precision policy that
`train.mixed_precision = "auto"` resolves to on it."""

from __future__ import annotations

import functools

import tensorflow as tf

VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
MIXED_PRECISION = ("", "float32", "auto", "mixed_bfloat16", "mixed_float16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The flags of the first CPU in /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def vector_flags() -> dict[str, bool]:
    """{avx2, avx512f, avx512_bf16, amx_bf16: present?}, printed beside every speed figure."""
    flags = cpu_flags()
    return {f: f in flags for f in VECTOR_FLAGS}


def has_bf16_matmul() -> bool:
    """Whether the CPU multiplies bfloat16 natively (AVX512_BF16 or AMX); without it oneDNN
    emulates bf16 and mixed precision gains nothing (measured, README "Performance")."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def mixed_precision_policy(setting: str) -> str:
    """The Keras dtype policy for `train.mixed_precision`: "" or "float32" -> float32;
    "auto" -> mixed_float16 on a GPU (with loss scaling in the trainer), mixed_bfloat16 on a
    CPU with native bf16 matmuls, else float32; "mixed_bfloat16" / "mixed_float16" as given."""
    if setting not in MIXED_PRECISION:
        raise ValueError(f"unknown train.mixed_precision '{setting}' "
                         f"({', '.join(repr(m) for m in MIXED_PRECISION)})")
    if setting == "auto":
        if tf.config.list_logical_devices("GPU"):
            return "mixed_float16"
        return "mixed_bfloat16" if has_bf16_matmul() else "float32"
    return setting or "float32"
