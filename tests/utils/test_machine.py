"""The machine's words every record prints: the ISA caps read from and added to an environment,
the CPU's vector extensions, the checkout's commit, and the JSON line a run prints."""

import json
import subprocess

import pytest

from pgn_tf.utils import machine, onednn
from pgn_tf.utils.procfs import cpu_flags

ALL_CAPS = (*machine.CAP_VARIABLES, *machine.FLAG_LISTS)


@pytest.fixture
def uncapped(monkeypatch):
    """This process with no ISA cap set, as most machines run."""
    for k in ALL_CAPS:
        monkeypatch.delenv(k, raising=False)


def test_active_caps_names_the_caps_set_and_only_the_isa_flag_of_a_flag_list():
    assert machine.active_caps({}) == ""
    assert machine.active_caps({"ONEDNN_MAX_CPU_ISA": "", "PATH": "/bin"}) == ""
    env = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
           "XLA_FLAGS": "--xla_dump_to=x --xla_cpu_max_isa=AVX2"}
    assert machine.active_caps(env) == ("ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                                        "XLA_FLAGS=--xla_cpu_max_isa=AVX2")
    assert machine.active_caps({"XLA_FLAGS": "--xla_dump_to=x"}) == ""


def test_active_caps_reads_this_process_by_default(uncapped, monkeypatch):
    assert machine.active_caps() == ""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert machine.active_caps() == "ATEN_CPU_CAPABILITY=avx2"


def test_with_cap_sets_a_variable_and_replaces_a_flag_among_others():
    env = {"PATH": "/bin"}
    assert machine.with_cap(env, "ONEDNN_MAX_CPU_ISA", "AVX2") == {
        "PATH": "/bin", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert env == {"PATH": "/bin"}  # a copy: the given env is left as it was
    assert machine.with_cap({"ONEDNN_MAX_CPU_ISA": "AVX512"}, "ONEDNN_MAX_CPU_ISA", "AVX2") == {
        "ONEDNN_MAX_CPU_ISA": "AVX2"}
    flags = {"XLA_FLAGS": "--xla_cpu_max_isa=AVX512 --xla_dump_to=x"}
    assert machine.with_cap(flags, "XLA_FLAGS", "--xla_cpu_max_isa=AVX2") == {
        "XLA_FLAGS": "--xla_dump_to=x --xla_cpu_max_isa=AVX2"}
    assert machine.with_cap({}, "XLA_FLAGS", "--xla_cpu_max_isa=AVX2") == {
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}


def test_emulation_environment_adds_every_cap_of_the_emulated_cpu():
    env = {"PATH": "/bin", "XLA_FLAGS": "--xla_dump_to=x"}
    out = machine.emulation_environment("avx2", env)
    assert out["PATH"] == "/bin"
    for k, v in machine.CPU_EMULATIONS["avx2"].items():
        if k in machine.FLAG_LISTS:
            assert out[k].split() == ["--xla_dump_to=x", v]
        else:
            assert out[k] == v
    assert machine.active_caps(out) == ("ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                                        "ATEN_CPU_CAPABILITY=avx2 "
                                        "XLA_FLAGS=--xla_cpu_max_isa=AVX2")
    assert machine.emulation_environment("native", env) == env
    assert machine.emulation_environment("native", env) is not env


def test_vector_flags_say_which_extensions_the_cpu_has():
    flags = machine.vector_flags()
    if cpu_flags() is None:
        assert flags is None
        return
    assert list(flags) == list(machine.VECTOR_FLAGS)
    assert flags == {f: f in cpu_flags() for f in machine.VECTOR_FLAGS}


def test_cpu_flags_text_lists_the_present_extensions_then_the_emulation(uncapped, monkeypatch):
    flags = machine.vector_flags()
    text = machine.cpu_flags_text()
    if flags is None:
        assert text == "unknown"
    elif any(flags.values()):
        assert text.split() == [f for f, on in flags.items() if on]
    else:
        assert text == "none of " + ",".join(machine.VECTOR_FLAGS)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert machine.cpu_flags_text() == text + " (emulating ONEDNN_MAX_CPU_ISA=AVX2)"


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_code_version_is_the_commit_and_says_when_the_tree_differs(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(k, raising=False)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert machine.code_version(str(plain)) == "unknown"
    assert machine.code_version(str(tmp_path / "missing")) == "unknown"

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-q", "-m", "first")
    head = git(repo, "rev-parse", "--short", "HEAD")
    assert machine.code_version(str(repo)) == head
    (repo / "new.py").write_text("untracked\n")  # untracked files are not the code that ran
    assert machine.code_version(str(repo)) == head
    (repo / "a.py").write_text("x = 2\n")
    assert machine.code_version(str(repo)) == head + "+changes"
    git(repo, "commit", "-q", "-am", "second")
    second = git(repo, "rev-parse", "--short", "HEAD")
    assert second != head
    assert machine.code_version(str(repo)) == second


def test_describe_names_the_machine_and_its_settings(uncapped, monkeypatch):
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    d = machine.describe()
    assert set(d) == {"cpus", "machine", "python", "cpu_flags", "isa_caps", "tf_onednn"}
    assert d["isa_caps"] == "MKL_ENABLE_INSTRUCTIONS=AVX2"
    assert d["cpu_flags"] == machine.cpu_flags_text()
    assert d["tf_onednn"] == onednn.state()


def test_result_line_and_report_lines_round_trip_through_json():
    result = {"steps_per_s": 1.5, "phases": ["a", "b"]}
    line = machine.result_line("benchmark", "train_speed", result)
    back = json.loads(line)
    assert back == {"benchmark": "train_speed", **result, **machine.describe()}

    lines = machine.report_lines("study", "rl", result)
    assert lines[0] == f"  cpu_flags: {machine.cpu_flags_text()}"
    assert lines[1] == f"  TensorFlow's oneDNN: {onednn.state()}"
    assert lines[2:4] == ["  steps_per_s: 1.5", "  phases: ['a', 'b']"]
    assert json.loads(lines[-1]) == {"study": "rl", **result, **machine.describe()}
    assert len(lines) == 5
