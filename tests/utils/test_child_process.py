"""Commands run with their output appended to a log: a failure raises with the log's tail, and
a command past its deadline is stopped with its whole process group."""

import os
import select
import signal
import sys

import pytest

from pgn_tf.utils import child_process

# A child that waits until a signal ends it (no timer of its own): only the deadline stops it.
WAITS = f"{sys.executable} -c 'import signal; signal.pause()'"


def test_run_logged_appends_each_command_and_its_output(tmp_path):
    log = tmp_path / "run.log"
    child_process.run_logged(["sh", "-c", "echo first; echo to-stderr >&2"], str(log))
    child_process.run_logged(["sh", "-c", "echo second"], str(log))
    text = log.read_text()
    assert text.splitlines() == ["$ sh -c echo first; echo to-stderr >&2", "first", "to-stderr",
                                 "$ sh -c echo second", "second"]


def test_run_logged_passes_its_keywords_on(tmp_path):
    log = tmp_path / "run.log"
    child_process.run_logged(["pwd"], str(log), cwd=str(tmp_path))
    assert log.read_text().splitlines()[-1] == str(tmp_path)


def test_a_failure_raises_with_the_command_and_the_logs_tail(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("early line\n" + "x" * child_process.TAIL_CHARS + "\n")
    with pytest.raises(RuntimeError) as e:
        child_process.run_logged(["sh", "-c", "echo the reason; exit 3", "ignored"], str(log))
    message = str(e.value)
    assert message.startswith("sh -c echo the reason; exit 3 failed:\n")
    assert message.rstrip().endswith("the reason")
    assert "early line" not in message  # only the tail
    assert len(message.split("\n", 1)[1]) == child_process.TAIL_CHARS


def test_run_python_runs_this_interpreter_with_the_env_given(tmp_path, monkeypatch):
    monkeypatch.setenv("PGN_TF_TEST_KEPT", "from-parent")
    log = tmp_path / "run.log"
    code = ("import os, sys; print(sys.executable); print(os.environ['PGN_TF_TEST_KEPT'], "
            "os.environ['PGN_TF_TEST_SET'], os.environ['TF_CPP_MIN_LOG_LEVEL'])")
    child_process.run_python(["-c", code], str(log), env={"PGN_TF_TEST_SET": "given"})
    lines = log.read_text().splitlines()
    assert lines[0].startswith(f"$ {sys.executable} -c ")
    assert lines[1:] == [sys.executable, "from-parent given 2"]
    assert "PGN_TF_TEST_SET" not in os.environ  # for that command only


def test_run_python_raises_on_failure(tmp_path):
    with pytest.raises(RuntimeError, match="no such module here"):
        child_process.run_python(["-c", "raise SystemExit('no such module here')"],
                                 str(tmp_path / "run.log"))


def test_run_for_returns_false_for_a_command_that_ends_in_time(tmp_path):
    log = tmp_path / "run.log"
    assert child_process.run_for(["sh", "-c", "echo done"], 120, str(log)) is False
    assert log.read_text().splitlines() == ["$ sh -c echo done", "done"]


def every_holder_gone(read_end: int) -> bool:
    """True once every process holding the pipe's write end has exited (the reader sees EOF)."""
    ready, _, _ = select.select([read_end], [], [], 60)
    return bool(ready) and os.read(read_end, 1) == b""


@pytest.mark.parametrize("ignores_term", [False, True])
def test_run_for_stops_the_whole_group_past_its_deadline(tmp_path, monkeypatch, ignores_term):
    """A command and the worker it started both hold a pipe; past the deadline both are gone,
    by SIGTERM or, where they ignore it, by SIGKILL after KILL_AFTER_S."""
    monkeypatch.setattr(child_process, "KILL_AFTER_S", 0.2)
    read_end, write_end = os.pipe()
    popen = {"pass_fds": (write_end,)}
    if ignores_term:  # set before the command starts, and inherited by its worker
        popen["preexec_fn"] = lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log = tmp_path / "run.log"
    try:
        stopped = child_process.run_for(["sh", "-c", f"{WAITS} & {WAITS}"], 0.2, str(log),
                                        **popen)
        os.close(write_end)  # this process' copy: the commands' are all that could be left
        write_end = None
        assert stopped is True
        assert every_holder_gone(read_end)
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)
    assert log.read_text().splitlines()[0] == f"$ sh -c {WAITS} & {WAITS}"
