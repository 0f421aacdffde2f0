"""pgn_tf.utils.onednn: the commands start TensorFlow with its oneDNN kernels on, where the user
left TF_ENABLE_ONEDNN_OPTS unset, on x86-64 (TensorFlow's own default leaves them off on CPUs
with AVX2 only)."""

import os
import subprocess
import sys
import types

import pytest

from pgn_tf import commands
from pgn_tf.utils import onednn, quiet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_environment_sets_it_only_where_unset_on_x86_64():
    assert onednn.environment({"A": "b"}, "x86_64") == {"A": "b", onednn.VARIABLE: "1"}
    assert onednn.environment({}, "AMD64")[onednn.VARIABLE] == "1"
    for users in ("0", "false", "", "1"):  # the user's setting, whatever it is, is kept
        assert onednn.environment({onednn.VARIABLE: users}, "x86_64") == {onednn.VARIABLE: users}
    # other CPUs keep TensorFlow's own default (this project measured x86-64 only)
    assert onednn.environment({}, "aarch64") == {}
    env = {"A": "b"}
    onednn.environment(env, "x86_64")
    assert env == {"A": "b"}  # a copy, the caller's mapping untouched


def test_start_sets_it_only_before_tensorflow_loads(monkeypatch):
    monkeypatch.setattr(onednn.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(onednn.VARIABLE, raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    assert not onednn.start() and onednn.VARIABLE not in os.environ  # too late: left alone
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert onednn.start() and os.environ[onednn.VARIABLE] == "1"
    assert not onednn.start()  # again: nothing more
    monkeypatch.setenv(onednn.VARIABLE, "0")
    assert not onednn.start() and os.environ[onednn.VARIABLE] == "0"


def test_state_names_the_setting():
    assert onednn.state({}) == "TensorFlow's default (unset)"
    assert onednn.state({onednn.VARIABLE: "1"}) == "on (TF_ENABLE_ONEDNN_OPTS=1)"
    assert onednn.state({onednn.VARIABLE: "False"}) == "off (TF_ENABLE_ONEDNN_OPTS=False)"
    assert onednn.state({onednn.VARIABLE: "x"}) == "TensorFlow's default (TF_ENABLE_ONEDNN_OPTS=x)"


def test_run_command_starts_it_before_the_command_module_loads(monkeypatch):
    order = []
    monkeypatch.setattr(onednn, "start", lambda: order.append("onednn") or True)
    monkeypatch.setattr(quiet, "start", lambda argv: order.append(("quiet", argv)))
    module = types.ModuleType("pgn_tf_fake_command")
    module.main = lambda argv: order.append(("main", argv)) or 7
    monkeypatch.setitem(sys.modules, "pgn_tf_fake_command", module)
    assert commands.run_command("pgn_tf_fake_command", ["--x"]) == 7
    assert order == ["onednn", ("quiet", ["--x"]), ("main", ["--x"])]


def _tensorflow_after_start(env: dict) -> tuple[str, bool]:
    """(TF_ENABLE_ONEDNN_OPTS as start() left it, "" for unset; whether TensorFlow, loaded after
    it in a fresh process with `env`, runs its oneDNN kernels: TensorFlow's own answer)."""
    code = ("import os; from pgn_tf.utils import onednn; onednn.start(); "
            "from tensorflow.python.util import _pywrap_util_port as p; "
            "print(os.environ.get(onednn.VARIABLE, ''), p.IsMklEnabled())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    value, _, enabled = proc.stdout.splitlines()[-1].rpartition(" ")
    return value, enabled == "True"


@pytest.mark.slow
def test_tensorflow_runs_onednn_after_start_and_honours_the_users_off():
    env = {k: v for k, v in os.environ.items() if k != onednn.VARIABLE}
    if onednn.platform.machine().lower() in onednn.X86_64:
        assert _tensorflow_after_start(env) == ("1", True)  # AVX2-only CPUs included
    else:  # other CPUs: the variable left unset, TensorFlow's own default in force
        assert _tensorflow_after_start(env)[0] == ""
    assert _tensorflow_after_start({**env, onednn.VARIABLE: "0"}) == ("0", False)
