import pytest
import tensorflow as tf

from pgn_tf.training import hardware
from pgn_tf.utils.errors import UserError

BF16_CPU = frozenset({"avx2", "avx512f", "avx512_bf16"})


@pytest.mark.parametrize("flags, gpus, expected", [
    (BF16_CPU, (), "mixed_bfloat16"),
    (frozenset({"avx2", "amx_bf16"}), (), "mixed_bfloat16"),
    (frozenset({"avx2", "avx512f"}), (), "float32"),  # bf16 emulated: no gain
    (None, (), "float32"),  # flags unreadable
    # a GPU trains: float16 with loss scaling from Volta's tensor cores (7.0) on, whatever the
    # CPU; the lowest GPU decides (MirroredStrategy runs on all)
    (BF16_CPU, ((7, 0),), "mixed_float16"),
    (frozenset(), ((9, 0),), "mixed_float16"),
    (frozenset(), ((8, 0), (8, 6)), "mixed_float16"),
    (BF16_CPU, ((6, 1),), "float32"),  # Pascal: no float16 tensor cores
    (frozenset(), ((8, 0), (6, 1)), "float32"),
])
def test_auto_policy_is_a_function_of_the_devices(flags, gpus, expected):
    assert hardware.choose_policy("auto", gpus, flags) == expected
    assert hardware.needs_loss_scaling(expected) == (expected == "mixed_float16")


def test_explicit_settings_are_kept_whatever_the_machine():
    for gpus in ((), ((9, 0),)):
        assert hardware.choose_policy("", gpus, BF16_CPU) == "float32"
        for policy in ("mixed_bfloat16", "mixed_float16"):
            assert hardware.choose_policy(policy, gpus, frozenset()) == policy
    with pytest.raises(ValueError, match="unknown train.mixed_precision 'float16'"):
        hardware.choose_policy("float16", (), None)
    assert not hardware.needs_loss_scaling("mixed_bfloat16")


def test_the_machine_is_read_from_tf_and_proc(monkeypatch):
    """mixed_precision_policy asks TF for the GPUs' compute capabilities and /proc for the CPU's
    flags, and hands them to choose_policy (no oneDNN cap, whatever this process runs under)."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(hardware, "cpu_flags", lambda: BF16_CPU)
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["gpu0"] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda gpu: {"compute_capability": (8, 6)})
    assert hardware.gpu_capabilities() == [(8, 6)]
    assert hardware.mixed_precision_policy("auto") == "mixed_float16"
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    assert hardware.mixed_precision_policy("auto") == "mixed_bfloat16"


def test_the_policies_match_the_config_choices():
    import typing

    from pgn_tf import config

    hint = typing.get_type_hints(config.TrainConfig)["mixed_precision"]
    assert typing.get_args(hint) == hardware.MIXED_PRECISION


AMX_CPU = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})


@pytest.mark.parametrize("cap, expected", [
    (None, AMX_CPU), ("", AMX_CPU), ("DEFAULT", AMX_CPU), ("all", AMX_CPU),
    ("avx512_core_amx", AMX_CPU),
    ("AVX512_CORE_BF16", AMX_CPU - {"amx_bf16"}),  # bf16 dot products, no tiles
    ("AVX512_CORE", AMX_CPU - {"amx_bf16", "avx512_bf16"}),
    ("AVX2", AMX_CPU - {"amx_bf16", "avx512_bf16"}),
    ("NOT_AN_ISA", AMX_CPU),  # oneDNN ignores a value it does not know, and so does auto
])
def test_onednn_cap_takes_away_the_bf16_flags_it_forbids(cap, expected):
    assert hardware.onednn_capped_flags(AMX_CPU, cap) == expected
    assert hardware.onednn_capped_flags(None, cap) is None


def test_auto_under_an_avx2_cap_picks_float32_as_an_avx2_cpu_does(monkeypatch):
    """ONEDNN_MAX_CPU_ISA=AVX2 on an AMX machine: bf16 would be emulated, so `auto` takes the
    float32 path a CPU without bf16 takes (what .ci/run's AVX2 step relies on)."""
    monkeypatch.setattr(hardware, "cpu_flags", lambda: AMX_CPU)
    monkeypatch.setattr(hardware, "gpu_capabilities", lambda: [])
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert hardware.mixed_precision_policy("auto") == "mixed_bfloat16"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert hardware.mixed_precision_policy("auto") == "float32"
    # bf16 asked outright would crash the process there: refused in words
    with pytest.raises(UserError, match="train.mixed_precision=mixed_bfloat16: bf16 cannot run "
                                        "under ONEDNN_MAX_CPU_ISA=AVX2"):
        hardware.mixed_precision_policy("mixed_bfloat16")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # TensorFlow's own bf16 kernels
    assert hardware.mixed_precision_policy("mixed_bfloat16") == "mixed_bfloat16"
    # an AVX2-only CPU multiplies bf16 with TensorFlow's kernels: no cap matters
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert hardware.mixed_precision_policy("mixed_bfloat16") == "mixed_bfloat16"


@pytest.mark.parametrize("flags, cap, opts, crashes", [
    (AMX_CPU, "AVX2", None, True),
    (AMX_CPU, "avx2_vnni_2", "1", True),  # the highest AVX2 level: still no bf16 kernel
    (AMX_CPU, "SSE41", None, True),
    (AMX_CPU, "AVX512_CORE", None, False),  # bf16 emulated with AVX-512: runs
    (AMX_CPU, "AVX512_CORE_BF16", None, False),
    (AMX_CPU, None, None, False), (AMX_CPU, "", None, False), (AMX_CPU, "ALL", None, False),
    (AMX_CPU, "NOT_AN_ISA", None, False),  # oneDNN ignores it
    (AMX_CPU, "AVX2", "0", False), (AMX_CPU, "AVX2", "false", False),  # oneDNN off
    (frozenset({"avx2", "avx512f"}), "AVX2", None, True),  # AVX-512 without bf16 too
    (frozenset({"avx2", "fma"}), "AVX2", None, False),  # TensorFlow's kernels, not oneDNN's
    (None, "AVX2", None, False),  # flags unreadable: not known to crash
])
def test_bf16_crashes_under_a_cap_below_avx512_on_an_avx512_cpu(flags, cap, opts, crashes):
    """Measured on an AVX512_BF16 CPU: a bf16 matmul under ONEDNN_MAX_CPU_ISA=AVX2 or
    AVX2_VNNI_2 kills the process (segfault; dnnl::error in training), and runs under
    AVX512_CORE or with TF_ENABLE_ONEDNN_OPTS=0."""
    why = hardware.bf16_crash_under_cap(flags, cap, opts)
    assert (why is not None) == crashes
    if crashes:
        assert f"ONEDNN_MAX_CPU_ISA={cap}" in why and "TF_ENABLE_ONEDNN_OPTS=0" in why
