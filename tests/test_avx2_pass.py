"""The suite's second pass (tests/avx2_pass.py): repeated only where the cap changes the kernels,
run under the cap, and its failures are the command's."""

import os

import pytest

from tests import avx2_pass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("flags, needed", [
    ({"avx2", "fma"}, False),                                         # AMD Zen 2/3
    ({"avx2", "fma", "avx512f"}, True),                               # Skylake-SP
    ({"avx2", "avx512f", "avx512_bf16"}, True),                       # Cooper Lake
    ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, True),
    ({"avx2", "avx_vnni"}, True),                                     # Alder Lake
    ({"avx2", "avx_vnni", "avx_ne_convert"}, True),                   # Sierra Forest
    (None, True),                                                     # flags unreadable
])
def test_the_pass_is_repeated_only_where_the_cap_changes_something(flags, needed):
    reason = avx2_pass.why_not_needed(None if flags is None else frozenset(flags))
    assert (reason is None) == needed
    if reason:
        assert "ONEDNN_MAX_CPU_ISA=AVX2 changes nothing" in reason


def test_an_avx2_only_cpu_says_why_and_runs_nothing(capsys, tmp_path):
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert False\n")
    assert avx2_pass.run([str(failing)], flags=frozenset({"avx2", "fma"})) == 0
    assert "AVX2 pass not repeated: this CPU has no instruction set above AVX2" in (
        capsys.readouterr().out)


def test_the_pass_runs_under_the_cap_and_fails_when_a_test_fails(tmp_path):
    probe = tmp_path / "test_cap.py"
    probe.write_text("import os\n\ndef test_cap():\n"
                     "    assert os.environ['ONEDNN_MAX_CPU_ISA'] == 'AVX2'\n")
    amx = frozenset({"avx2", "avx512f", "amx_tile"})
    args = ["-p", "no:cacheprovider", "-n", "0", "--rootdir", str(tmp_path)]
    assert avx2_pass.run([str(probe)], args, amx) == 0
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert False\n")
    assert avx2_pass.run([str(failing)], args, amx) == 1


def test_its_paths_exist():
    for path in avx2_pass.PATHS:
        assert os.path.exists(os.path.join(ROOT, path)), path
