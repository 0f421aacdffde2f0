"""The console commands of setup.py: each is its `python -m` form's main(), and `--help` works.
After `pip install -e .` (as .ci/run does) the installed `pgn-summarize` script is run too."""

import ast
import importlib
import importlib.metadata
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRED = {"pgn-train": "pgn_tf.train", "pgn-evaluate": "pgn_tf.evaluate",
            "pgn-summarize": "pgn_tf.summarize", "pgn-export": "pgn_tf.export",
            "pgn-serve": "pgn_tf.serving.server", "pgn-pipeline": "pgn_tf.pipelines.run"}


def setup_commands() -> dict:
    """setup.py's COMMANDS, read without running setup()."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "COMMANDS":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no COMMANDS")


COMMANDS = setup_commands()


def test_the_issue_commands_are_their_python_m_forms():
    for name, module in REQUIRED.items():
        assert COMMANDS[name] == f"{module}:main"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help(name, capsys):
    module, func = COMMANDS[name].split(":")
    main = getattr(importlib.import_module(module), func)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and module in out  # its prog is the python -m form


def test_installed_pgn_summarize_help():
    """In an environment installed from this checkout (CI), the script itself runs."""
    try:
        dist = importlib.metadata.distribution("pgn_tf")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("pgn_tf is not installed: pip install -e .")
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts == COMMANDS, "the installed console commands differ: pip install -e ."
    exe = shutil.which("pgn-summarize")
    assert exe, "pgn-summarize is not on PATH"
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0 and "--input" in done.stdout, done.stderr
