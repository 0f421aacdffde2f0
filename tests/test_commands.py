"""The console commands of setup.py and the `python -m` commands of the docs pages: both forms of
a command hand its module to pgn_tf.commands.run_command (the quiet start before TensorFlow
loads, then the module's main()), and `--help` works. Every `python -m` module of the package
is a console command or says why not (pgn_tf.commands.NOT_COMMANDS). After `pip install -e .`
(as .ci/run does) the installed console scripts are checked and the `pgn-summarize` script is
run too."""

import ast
import contextlib
import glob
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
DOCS = os.path.join(ROOT, "docs")
# The installed package's folders: pipelines/ and serving/ install inside it (setup.py).
PACKAGE_DIRS = {"pgn_tf": "pgn_tf", "pipelines": "pgn_tf.pipelines", "serving": "pgn_tf.serving"}


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
    quietly (docs/getting-started.md) and run the same main()."""
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


def docs_text() -> str:
    """Every docs/**/*.md page, one after another (in name order)."""
    pages = sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
    assert pages, "docs/ holds no .md page"
    return "\n".join(open(page, encoding="utf-8").read() for page in pages)


def test_the_docs_name_the_commands_and_modules_that_run():
    """The docs pages together name every console command, with the module setup.py runs for
    it, and every `python -m pgn_tf...` module they show exists and starts through run_command
    (a placeholder such as `python -m pgn_tf.VERB`, in capitals, names no module)."""
    text = docs_text()
    assert set(re.findall(r"(?<![\w-])pgn-[a-z]+(?:-[a-z]+)*", text)) == set(COMMANDS) == \
        set(commands.COMMANDS)
    for name, module in re.findall(r"`(pgn-[a-z-]+)`\s+\(`([\w.]+)`\)", text):
        assert commands.COMMANDS[name] == module, (name, module)
    modules = set(re.findall(r"python\s+-m\s+(pgn_tf(?:\.[a-z_][a-z0-9_]*)+)\b", text))
    assert set(commands.COMMANDS.values()) <= modules  # each command shown in its python -m form
    wrong = sorted(m for m in modules if python_m_runs(m) != m)
    assert not wrong, f"the docs show python -m {wrong}: not started via run_command"


def main_guard_modules() -> dict:
    """{dotted module name: path} of the package's modules with a module-level
    `if __name__ == "__main__":` block (a docstring that shows one does not count)."""
    found = {}
    for folder, package in PACKAGE_DIRS.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                tree = ast.parse(open(path, encoding="utf-8").read())
                if any(isinstance(node, ast.If) and
                       ast.unparse(node.test) == "__name__ == '__main__'" for node in tree.body):
                    rel = os.path.relpath(path, os.path.join(ROOT, folder))[:-3]
                    parts = [p for p in rel.split(os.sep) if p != "__init__"]
                    found[".".join([package] + parts)] = path
    return found


def test_every_python_m_module_is_a_command_or_says_why_not():
    """A module that runs as `python -m` is a console script (COMMANDS) or in NOT_COMMANDS
    with its reason, never both; neither table names a module that is not there; and each one
    starts through run_command."""
    found = main_guard_modules()
    scripts = set(commands.COMMANDS.values())
    assert not scripts & set(commands.NOT_COMMANDS), "a module in both tables"
    missing = sorted(set(found) - scripts - set(commands.NOT_COMMANDS))
    assert not missing, f"python -m modules in neither table of pgn_tf/commands.py: {missing}"
    gone = sorted((scripts | set(commands.NOT_COMMANDS)) - set(found))
    assert not gone, f"pgn_tf/commands.py names modules without a __main__ block: {gone}"
    assert all(why.strip() for why in commands.NOT_COMMANDS.values())
    wrong = sorted(m for m in found if python_m_runs(m) != m)
    assert not wrong, f"python -m {wrong} does not start via run_command"


def test_the_scan_counts_guards_not_docstrings(tmp_path, monkeypatch):
    """The scan above counts a module-level guard, not one shown in a docstring (as
    pgn_tf/commands.py's is), nor one inside a function."""
    pkg = tmp_path / "pgn_tf"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "tool.py").write_text('if __name__ == "__main__":\n    pass\n')
    (pkg / "doc.py").write_text('"""\nif __name__ == "__main__":\n"""\n')
    (pkg / "inner.py").write_text('def f():\n    if __name__ == "__main__":\n        pass\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_DIRS", {"pgn_tf": "pgn_tf"})
    assert set(main_guard_modules()) == {"pgn_tf.sub.tool"}


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
