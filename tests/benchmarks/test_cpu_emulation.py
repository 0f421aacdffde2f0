"""benchmarks' `--cpu avx2`: one machine measuring as a CPU with AVX2 only would (the caps in
pgn_tf.utils.machine, the restart in benchmarks.common)."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import common
from pgn_tf.utils import machine, onednn

pytestmark = pytest.mark.study  # the speed tools, apart from the product (pyproject.toml)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_emulation_restarts_the_process_with_the_caps(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda *a: calls.append(a))
    for k in machine.CAP_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/dev/null --xla_cpu_max_isa=AVX512")
    monkeypatch.setenv(onednn.VARIABLE, "1")  # as the commands set it: no restart for that
    common.emulate_cpu("native", "benchmarks.x", ["--a"])
    assert calls == []
    common.emulate_cpu("avx2", "benchmarks.x", ["--a", "1"])
    (exe, argv, env), = calls
    assert argv == [sys.executable, "-m", "benchmarks.x", "--a", "1"]
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"  # PyTorch's own kernels (the peer's)
    # XLA's generated code (decode.jit_step), the other XLA flags kept
    assert env["XLA_FLAGS"] == "--xla_dump_to=/dev/null --xla_cpu_max_isa=AVX2"
    # once restarted under the caps, it runs (no second restart) and names them
    for k, v in env.items():
        if k in machine.CPU_EMULATIONS["avx2"]:
            monkeypatch.setenv(k, v)
    common.emulate_cpu("avx2", "benchmarks.x", ["--a", "1"])
    assert len(calls) == 1
    assert common.cpu_flags().endswith(
        "(emulating ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
        "ATEN_CPU_CAPABILITY=avx2 XLA_FLAGS=--xla_cpu_max_isa=AVX2)")


def test_a_native_run_restarts_with_onednn_on_where_unset(monkeypatch):
    """A benchmark measures what the commands run (pgn_tf.utils.onednn): TensorFlow's oneDNN on
    where TF_ENABLE_ONEDNN_OPTS is unset on x86-64; the user's setting is kept."""
    calls = []
    monkeypatch.setattr(os, "execvpe", lambda *a: calls.append(a))
    monkeypatch.setattr(common.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(onednn.VARIABLE, raising=False)
    common.emulate_cpu("native", "benchmarks.x", ["--a"])
    (exe, argv, env), = calls
    assert argv == [sys.executable, "-m", "benchmarks.x", "--a"] and env[onednn.VARIABLE] == "1"
    assert not any(k in env for k in machine.CAP_VARIABLES if k not in os.environ)
    monkeypatch.setenv(onednn.VARIABLE, "0")
    common.emulate_cpu("native", "benchmarks.x", ["--a"])
    assert len(calls) == 1
    assert json.loads(common.result_line("x", {}))["tf_onednn"] == "off (TF_ENABLE_ONEDNN_OPTS=0)"


def test_explicit_bf16_is_refused_under_the_emulation():
    common.refuse_emulated_bf16("native", "mixed_bfloat16", "--set")
    common.refuse_emulated_bf16("avx2", "auto", "--set")
    with pytest.raises(ValueError, match="runs as a CPU without bf16"):
        common.refuse_emulated_bf16("avx2", "mixed_bfloat16", "--set")


def test_train_throughput_under_avx2_trains_auto_in_float32():
    """The real command: restarted with the caps, `auto` resolves to float32 whatever this
    machine's CPU, and the JSON line records the caps beside the flags."""
    env = {k: v for k, v in os.environ.items() if k not in machine.CAP_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.train_throughput", "--cpu", "avx2", "--steps", "2",
         "--warmup", "1", "--set", "train.mixed_precision=auto", "--set", "model.hidden_dim=16",
         "--set", "model.emb_dim=8"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = json.loads([x for x in proc.stdout.splitlines() if x.startswith("{")][-1])
    assert line["precision"] == "float32"
    assert line["isa_caps"] == ("ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                                "ATEN_CPU_CAPABILITY=avx2 XLA_FLAGS=--xla_cpu_max_isa=AVX2")
    assert "(emulating ONEDNN_MAX_CPU_ISA=AVX2" in line["cpu_flags"]
