"""The console commands of setup.py and the `python -m` commands of docs/usage.md: both forms of
a command hand its module to pgn_tf.commands.run_command (the quiet start before TensorFlow
loads, then the module's main()), and `--help` works. After `pip install -e .` (as .ci/run does)
the installed console scripts are checked and the `pgn-summarize` script is run too."""

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from pgn_tf import commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USAGE = os.path.join(ROOT, "docs", "usage.md")


def setup_commands() -> dict:
    """setup.py's console scripts {name: target}, from its console_scripts() (which reads
    pgn_tf/commands.py's table), run without running setup()."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "console_scripts":
            scope: dict = {}
            exec("import ast\n" + ast.unparse(node), scope)
            scripts = scope["console_scripts"](os.path.join(ROOT, "pgn_tf", "commands.py"))
            return dict(line.split(" = ") for line in scripts)
    raise AssertionError("setup.py has no console_scripts()")


COMMANDS = setup_commands()


def installed_scripts() -> dict:
    """The console_scripts entry points of the installed pgn_tf, by name."""
    try:
        dist = importlib.metadata.distribution("pgn_tf")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("pgn_tf is not installed: pip install -e .")
    return {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}


def python_m_runs(module: str) -> str | None:
    """The module that `python -m MODULE` hands to run_command in MODULE's `__main__` guard, or
    None when there is no such guard ahead of the module's imports (after them, TensorFlow would
    load before the quiet start)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"there is no module {module}"
    tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != \
                "__future__":
            return None
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            for call in ast.walk(node):
                if (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "run_command"
                        and call.args and isinstance(call.args[0], ast.Constant)):
                    return call.args[0].value
    return None


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_console_command_is_its_python_m_form(name, monkeypatch):
    """`pgn-train ARGS` is `python -m pgn_tf.train ARGS` (setup.py's promise): the installed
    script and the module's `__main__` guard both hand pgn_tf.train to run_command, so both start
    quietly (docs/usage.md) and run the same main()."""
    module = commands.COMMANDS.get(name)
    assert module, f"{name} is in setup.py but not in pgn_tf.commands.COMMANDS"
    assert COMMANDS[name] == "pgn_tf.commands:" + getattr(commands, COMMANDS[name].split(":")[1]
                                                          ).__name__
    assert python_m_runs(module) == module, f"python -m {module} does not start via run_command"
    ep = installed_scripts().get(name)
    assert ep is not None and ep.value == COMMANDS[name], \
        "the installed console commands differ from setup.py's: pip install -e ."
    script = ep.load()
    assert callable(script)
    ran = []
    monkeypatch.setattr(commands, "run_command", lambda module, argv=None: ran.append(module) or 0)
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with contextlib.suppress(SystemExit):  # a script that bypasses run_command prints its help
        script()
    assert ran == [module], f"the {name} script ({ep.value}) does not start via run_command"


def test_the_usage_docs_name_the_commands_and_modules_that_run():
    """docs/usage.md names every console command, with the module setup.py runs for it, and
    every `python -m` module it shows exists and starts through run_command."""
    text = open(USAGE, encoding="utf-8").read()
    assert set(re.findall(r"(?<![\w-])pgn-[a-z]+(?:-[a-z]+)*", text)) == set(COMMANDS) == \
        set(commands.COMMANDS)
    for name, module in re.findall(r"`(pgn-[a-z-]+)` \(`([\w.]+)`\)", text):
        assert commands.COMMANDS[name] == module, (name, module)
    modules = set(re.findall(r"python\s+-m\s+(pgn_tf(?:\.\w+)+)", text))
    assert set(commands.COMMANDS.values()) <= modules  # each command shown in its python -m form
    wrong = sorted(m for m in modules if python_m_runs(m) != m)
    assert not wrong, f"docs/usage.md shows python -m {wrong}: not started via run_command"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help(name, capsys):
    module = commands.COMMANDS[name]
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and module in out  # its prog is the python -m form


def test_installed_pgn_summarize_help():
    """In an environment installed from this checkout (CI), the script itself runs."""
    scripts = {name: ep.value for name, ep in installed_scripts().items()}
    assert scripts == COMMANDS, "the installed console commands differ: pip install -e ."
    exe = shutil.which("pgn-summarize")
    assert exe, "pgn-summarize is not on PATH"
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0 and "--input" in done.stdout, done.stderr
