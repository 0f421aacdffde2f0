import pytest
import tensorflow as tf

from pgn_tf import hardware


@pytest.fixture
def machine(monkeypatch):
    """Sets what pgn_tf.hardware sees: the CPU's flags and the GPUs' compute capabilities."""

    def set_machine(flags, gpus=()):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
        monkeypatch.setattr(tf.config, "list_physical_devices",
                            lambda kind=None: list(gpus) if kind == "GPU" else [])
        monkeypatch.setattr(tf.config.experimental, "get_device_details",
                            lambda gpu: {"compute_capability": gpu})

    return set_machine


@pytest.mark.parametrize("flags, gpus, expected", [
    (frozenset({"avx2", "avx512f", "avx512_bf16"}), (), "mixed_bfloat16"),
    (frozenset({"avx2", "amx_bf16"}), (), "mixed_bfloat16"),
    (frozenset({"avx2", "avx512f"}), (), "float32"),  # bf16 emulated: no gain
    (None, (), "float32"),  # flags unreadable
    (frozenset({"avx512_bf16"}), ((7, 5),), "float32"),  # the GPU trains, and it lacks bf16
    (frozenset(), ((9, 0),), "mixed_bfloat16"),
])
def test_auto_picks_bfloat16_only_where_it_is_native(machine, flags, gpus, expected):
    machine(flags, gpus)
    assert hardware.mixed_precision_policy("auto") == expected


def test_explicit_settings_are_kept_whatever_the_machine(machine):
    machine(frozenset({"avx512_bf16"}))
    assert hardware.mixed_precision_policy("") == "float32"
    assert hardware.mixed_precision_policy("mixed_bfloat16") == "mixed_bfloat16"
    with pytest.raises(ValueError, match="unknown train.mixed_precision 'mixed_float16'"):
        hardware.mixed_precision_policy("mixed_float16")


def test_the_policies_match_the_config_choices():
    import typing

    from pgn_tf import config

    hint = typing.get_type_hints(config.TrainConfig)["mixed_precision"]
    assert typing.get_args(hint) == hardware.MIXED_PRECISION
