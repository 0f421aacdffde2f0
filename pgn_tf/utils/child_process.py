"""Commands run as child processes, each with its output appended to a log file: the one place
the long runs outside the product (the speed tools' reference system, the studies' training
phases) start them, bound their time, and say why they failed.

    run_logged(args, log)            RuntimeError with the log's tail when the command fails
    run_python(args, log, env)       the same for `python ARGS`, TensorFlow's C++ log quiet
    run_for(args, seconds, log)      stopped (its whole process group) after `seconds`

A run over hours keeps every command's output in one log, so a failure is read after the fact;
the error names the command and ends with the log's last lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

TAIL_CHARS = 3000  # of the log, in the error of a command that failed
KILL_AFTER_S = 60  # between SIGTERM and SIGKILL, for a command past its deadline


def run_logged(args: list[str], log: str, **popen) -> None:
    """Runs a command (subprocess.run's keywords in popen), its output appended to log;
    RuntimeError with the log's tail when it fails."""
    with open(log, "a") as f:
        f.write("$ " + " ".join(args) + "\n")
        f.flush()
        proc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, **popen)
    if proc.returncode:
        with open(log) as f:
            tail = f.read()[-TAIL_CHARS:]
        raise RuntimeError(f"{' '.join(args[:3])} failed:\n{tail}")


def run_python(args: list[str], log: str, env: dict[str, str] | None = None) -> None:
    """run_logged of `python ARGS` (this interpreter), e.g. ["-m", "pgn_tf.train", ...]. env:
    variables set for this command only, on top of this process's."""
    run_logged([sys.executable, *args], log,
               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})))


def run_for(args: list[str], seconds: float, log: str, **popen) -> bool:
    """Runs a command (its output appended to log) until it exits or `seconds` pass; then
    SIGTERM to its process group (it runs in a session of its own, so its workers stop too),
    SIGKILL KILL_AFTER_S later if it is still there. True when the deadline stopped it."""
    with open(log, "a") as f:
        f.write("$ " + " ".join(args) + "\n")
        f.flush()
        proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True, **popen)
        done = threading.Event()
        threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
        if done.wait(seconds):
            return False
        os.killpg(proc.pid, signal.SIGTERM)
        if not done.wait(KILL_AFTER_S):
            os.killpg(proc.pid, signal.SIGKILL)
            done.wait()
        return True
