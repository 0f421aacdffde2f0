"""What the machine offers for speed: the CPU's flags, the GPUs, and the mixed-precision policy
that `train.mixed_precision = "auto"` resolves to on them (`choose_policy`, a pure function of
the device list, so every machine's choice is tested on any machine)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from pgn_tf.utils.errors import UserError
from pgn_tf.utils.procfs import cpu_flags

MIXED_PRECISION = ("", "auto", "mixed_bfloat16", "mixed_float16")
# float16 tensor cores from Volta (7.0) on: Keras's guidance for where mixed precision pays.
FLOAT16_COMPUTE_CAPABILITY = (7, 0)


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


# oneDNN's `ONEDNN_MAX_CPU_ISA` caps, lowest first (its documented values; AVX10_1_512* are the
# newer names of AVX512_CORE_FP16 and the AMX levels). A cap below a level takes away what that
# level adds: bf16 dot products from AVX512_CORE_BF16, AMX tiles from AVX512_CORE_AMX.
ONEDNN_ISA_LEVELS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                     "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512",
                     "AVX512_CORE_AMX", "AVX10_1_512_AMX", "AVX512_CORE_AMX_FP16",
                     "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2")
_FLAG_FROM = {"avx512_bf16": "AVX512_CORE_BF16", "amx_bf16": "AVX512_CORE_AMX"}


def onednn_capped_flags(flags: frozenset[str] | None, max_isa: str | None) -> frozenset[str] | None:
    """`flags` less the bf16 ones that oneDNN may not use under `ONEDNN_MAX_CPU_ISA` = max_isa.

    A CPU with AMX run under `ONEDNN_MAX_CPU_ISA=AVX2` multiplies bf16 the way an AVX2-only CPU
    does (emulated, slower than float32), so `auto` must choose as it would there: this is what
    lets one machine take the path every CPU type takes. None, "", DEFAULT, ALL and values oneDNN
    does not know (it ignores them too) cap nothing."""
    cap = (max_isa or "").strip().upper()
    if flags is None or cap not in ONEDNN_ISA_LEVELS:
        return flags
    level = ONEDNN_ISA_LEVELS.index(cap)
    return frozenset(f for f in flags
                     if f not in _FLAG_FROM or ONEDNN_ISA_LEVELS.index(_FLAG_FROM[f]) <= level)


# The lowest cap under which oneDNN still multiplies bf16 (emulated with AVX-512 below
# AVX512_CORE_BF16). TensorFlow hands its bf16 matmuls to oneDNN on a CPU with AVX-512 whatever
# the cap; capped lower, oneDNN has no bf16 kernel for them and the process dies (a segfault or
# an abort from dnnl::error, seen on an AVX512_BF16 CPU under AVX2 and AVX2_VNNI_2). On a CPU
# without AVX-512, TensorFlow multiplies bf16 with its own kernels and no cap matters.
BF16_LOWEST_CAP = "AVX512_CORE"


def bf16_crash_under_cap(flags: frozenset[str] | None, max_isa: str | None,
                         onednn_opts: str | None) -> str | None:
    """Why bf16 would kill this process (a sentence), or None where it runs: a CPU with AVX-512
    (`flags`, /proc's, uncapped), oneDNN on (`onednn_opts`: TF_ENABLE_ONEDNN_OPTS, unset = on)
    and `max_isa` (ONEDNN_MAX_CPU_ISA) below BF16_LOWEST_CAP."""
    cap = (max_isa or "").strip().upper()
    if (not flags or not flags & {"avx512f", "avx_ne_convert"}
            or (onednn_opts or "").strip().lower() in ("0", "false")
            or cap not in ONEDNN_ISA_LEVELS
            or ONEDNN_ISA_LEVELS.index(cap) >= ONEDNN_ISA_LEVELS.index(BF16_LOWEST_CAP)):
        return None
    return (f"bf16 cannot run under ONEDNN_MAX_CPU_ISA={max_isa} on this CPU (it has AVX-512, "
            "so TensorFlow hands bf16 matmuls to oneDNN, which the cap leaves without a bf16 "
            "kernel, and the process would crash): train in float32 (train.mixed_precision= or "
            f"auto), raise the cap to {BF16_LOWEST_CAP} or above, or set TF_ENABLE_ONEDNN_OPTS=0 "
            "before starting (bf16 then runs on TensorFlow's own kernels, as on an AVX2-only "
            "CPU)")


def bf16_crash_here() -> str | None:
    """bf16_crash_under_cap for this process: /proc's flags and its environment's cap."""
    return bf16_crash_under_cap(cpu_flags(), os.environ.get("ONEDNN_MAX_CPU_ISA"),
                                os.environ.get("TF_ENABLE_ONEDNN_OPTS"))


def mixed_precision_policy(setting: str) -> str:
    """choose_policy on this machine's GPUs and the CPU flags oneDNN may use (its
    `ONEDNN_MAX_CPU_ISA` cap applied to /proc's flags). Raises UserError where the policy is
    bf16 and the cap would crash it (bf16_crash_under_cap): `auto` never picks bf16 under such
    a cap, so only an explicit mixed_bfloat16 gets here."""
    gpus = gpu_capabilities()
    policy = choose_policy(setting, gpus,
                           onednn_capped_flags(cpu_flags(), os.environ.get("ONEDNN_MAX_CPU_ISA")))
    if policy == "mixed_bfloat16" and not gpus and (why := bf16_crash_here()):
        raise UserError(f"train.mixed_precision={setting}: {why}")
    return policy


def needs_loss_scaling(policy: str) -> bool:
    """Whether training under `policy` scales its loss (float16: gradients below its 6e-8
    underflow to zero); bf16 keeps float32's exponent range and needs none."""
    return policy == "mixed_float16"
