"""The quickstart's first minute as a user sees it: `python -m pgn_tf.quickstart`, as README.md
shows it, prints our own lines and nothing else. Every line of its standard output and error
must have one of the shapes below; a TensorFlow, absl or C++ log line that passes the quiet
start (pgn_tf/utils/quiet.py) fails the test, and so does any other stray line."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The lines the quickstart prints (pgn_tf/quickstart.py, the training bar of
# pgn_tf/utils/progress.py and the [pgn_tf] lines of pgn_tf/utils/logs.py).
OURS = [re.compile(p) for p in (
    r"^$",
    r"^== \d\. [a-z]",  # a step's heading
    r"^\[pgn_tf\] \S",  # training's log lines
    r"^ *\d+/\d+s? \[[=.]+\] (compiling|ETA [\d:]+s?|[\d:]+s?)( - .+)?$",  # the training bar
    r"^(article|reference|summary): +\S",
    r"^\{\"system\": \"model\", .*\}$",  # the evaluation's metrics
    r"^\S*export/pgn/\d+$",  # the export's path
    r"^server on localhost:\d+ \(REST \d+\) answered: \S",
    r"^quickstart done: model, export and TensorBoard logs in \S+$",
    r"^  tensorboard --logdir \S+$",
)]
# What a log line of TensorFlow, absl or their C++ side looks like: named in the failure.
FOREIGN = re.compile(r"^[IWEF]\d{4} |\.cc:\d+\]|WARNING:tensorflow|WARNING:absl|"
                     r"oneDNN custom operations|^WARNING: All log messages|Traceback|Warning:")


def unexpected(text: str) -> list[str]:
    """The lines of `text` (a progress bar's carriage returns split lines too) that are not
    ours, foreign log lines first."""
    lines = [line.rstrip() for line in re.split(r"[\r\n]", text)]
    stray = [line for line in lines if not any(p.search(line) for p in OURS)]
    return sorted(stray, key=lambda line: not FOREIGN.search(line))


def test_the_shapes_tell_our_lines_from_logs():
    """The allow-list passes the quickstart's own lines and stops TensorFlow's."""
    ours = ("== 1. training the tiny pointer-generator in runs/q/model\n"
            "[pgn_tf] step 0: eval loss 4.4731, eval nll 4.4731\n"
            "  0/600 [....................] compiling - step: 0\n"
            " 90/600 [===.................] ETA 28s - 57ms/step - step: 90 - loss: 2.7426\r"
            "600/600 [====================] 46s - 71ms/step - step: 600\n"
            "summary:   hamolek planted 4994 trees in ixdraton.\n"
            '{"system": "model", "examples": 200}\nruns/q/export/pgn/1796278487\n')
    assert unexpected(ours) == []
    logs = ("W0000 00:00:1796278481.712223   23094 loop_optimizer.cc:934] Skipping loop "
            "optimization for Merge node with control input: cond/branch_executed/_143\n"
            "WARNING:tensorflow:5 out of the last 5 calls triggered tf.function retracing.\n"
            " 1/600 29:57 3s/step\n")
    assert len(unexpected(ours + logs)) == 3


@pytest.mark.slow
def test_the_quickstart_prints_only_its_own_lines(tmp_path):
    """README.md's quickstart command, quiet as a user runs it (no PGN_TF_VERBOSE, no
    TF_CPP_MIN_LOG_LEVEL of the user's own), with a fresh work dir."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGN_TF_VERBOSE", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    workdir = tmp_path / "quickstart"
    done = subprocess.run([sys.executable, "-m", "pgn_tf.quickstart", "--workdir", str(workdir)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "quickstart done" in done.stdout
    assert unexpected(done.stdout) == [], "standard output has lines that are not ours"
    assert unexpected(done.stderr) == [], "standard error has lines that are not ours"
