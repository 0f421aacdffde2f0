"""DirLock against real processes: a live holder in another process refuses, a killed one's
lock is taken over, and racing takeovers of one stale lock leave exactly one holder."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from pgn_tf.utils.dirlock import LOCK_NAME, DirLock
from pgn_tf.utils.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOLD = """
import sys
from pgn_tf.utils.dirlock import DirLock
lock = DirLock(sys.argv[1], "run dir").acquire()
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin or kills us
lock.release()
"""


def hold_in_subprocess(path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.stdout.readline().strip() == "held"
    return proc


def holder(path):
    return json.loads((path / LOCK_NAME).read_text())


def test_second_holder_is_refused_with_the_pid_and_a_killed_holders_lock_is_taken_over(tmp_path):
    proc = hold_in_subprocess(tmp_path)
    try:
        assert holder(tmp_path)["pid"] == proc.pid
        with pytest.raises(UserError) as e:
            DirLock(str(tmp_path), "run dir").acquire()
        assert str(e.value).startswith(f"run dir {tmp_path} is in use by pid {proc.pid} (started ")
        assert holder(tmp_path)["pid"] == proc.pid  # the refusal left the holder's lock alone
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and holder(tmp_path)["pid"] == proc.pid  # stale
    with DirLock(str(tmp_path), "run dir") as lock:
        assert lock.held and holder(tmp_path)["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_holder_that_exits_normally_releases(tmp_path):
    proc = hold_in_subprocess(tmp_path)
    proc.communicate("")  # closes stdin: it releases and exits
    assert proc.returncode == 0 and not (tmp_path / LOCK_NAME).exists()


def test_released_on_exception_and_not_reentrant(tmp_path):
    d = str(tmp_path / "new" / "dir")  # created by acquire
    with pytest.raises(RuntimeError, match="boom"), DirLock(d, "model dir"):
        with pytest.raises(UserError, match=f"model dir {d} is in use by pid {os.getpid()} "):
            DirLock(d, "model dir").acquire()
        raise RuntimeError("boom")
    assert not os.path.exists(os.path.join(d, LOCK_NAME))


def write_lock(path, **fields):
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": "then",
            "proc_start": None, **fields}
    (path / LOCK_NAME).write_text(json.dumps(info))


def test_stale_locks_are_taken_over_live_or_foreign_ones_are_not(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        # A live process of this host holds it.
        write_lock(tmp_path, pid=sleeper.pid)
        with pytest.raises(UserError, match=f"in use by pid {sleeper.pid} \\(started then\\)"):
            DirLock(str(tmp_path)).acquire()
        # The same pid, but a process younger than the lock's: the pid was reused.
        if os.path.exists(f"/proc/{sleeper.pid}/stat"):
            write_lock(tmp_path, pid=sleeper.pid, proc_start="1")
            DirLock(str(tmp_path)).acquire().release()
    finally:
        sleeper.communicate(b"")
    # Another host: never taken over, even with a pid that is dead here.
    write_lock(tmp_path, pid=sleeper.pid, host="elsewhere.example")
    with pytest.raises(UserError, match=f"on host elsewhere.example .*delete {tmp_path}"):
        DirLock(str(tmp_path)).acquire()
    # This host, the process is gone.
    write_lock(tmp_path, pid=sleeper.pid)
    DirLock(str(tmp_path)).acquire().release()
    # A lock file left empty by a process killed between creating and writing it.
    (tmp_path / LOCK_NAME).write_text("")
    os.utime(tmp_path / LOCK_NAME, (time.time() - 60, time.time() - 60))
    DirLock(str(tmp_path)).acquire().release()


RACE = """
import sys
from pgn_tf.utils.dirlock import DirLock
from pgn_tf.utils.errors import UserError
print("ready", flush=True)
sys.stdin.readline()  # start together
try:
    DirLock(sys.argv[1]).acquire()
    print("won", flush=True)
    sys.stdin.read()
except UserError:
    print("refused", flush=True)
"""


def test_racing_takeovers_of_one_stale_lock_leave_one_holder(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_lock(tmp_path, pid=dead.pid)
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 4
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.stdout.readline().strip() for p in procs]
        assert sorted(results) == ["refused"] * 3 + ["won"]
        assert holder(tmp_path)["pid"] == procs[results.index("won")].pid
    finally:
        for p in procs:
            p.kill()
            p.wait()
