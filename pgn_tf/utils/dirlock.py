"""One writer per directory: a lock file that says who holds it.

    with DirLock(model_dir, what="model dir"):
        ...  # this process is the only writer of model_dir

Acquiring creates `<path>/.lock` with O_CREAT | O_EXCL (atomic: of two processes, exactly one
creates it) holding the holder's pid, host and start time as JSON; leaving the `with` block
removes it, also on an exception. A second process is refused with a UserError:
"model dir runs/x is in use by pid 4242 (started 2025-01-31 12:00:00)".

A lock whose holder is gone is stale and taken over: same host, and the pid is not running, is
a zombie, or now belongs to a younger process (a reused pid; the holder's process start time is
recorded where /proc has it). A lock written on another host is never taken over, since its
process cannot be checked from here: the message says so and which file to delete.

Why not `filelock` or a bare flock(): a flock is released by the kernel when its holder dies,
but it does not say who holds it, and flock does not cross hosts on every network file system.
flock is used here only around a takeover, so two processes that both find the same stale lock
cannot both take it over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time

from pgn_tf.utils.errors import UserError

LOCK_NAME = ".lock"
# A lock file is written right after it is created; one still unreadable after this long was
# left by a process killed in between.
_UNREADABLE_GRACE_S = 5.0


class DirLock:
    """An exclusive, non-reentrant lock on a directory (created if missing).

    Args:
      path: the directory.
      what: how messages name it ("model dir", "pipeline run dir").

    `acquire()` returns self or raises UserError naming the holder; `release()` removes the
    lock if this object holds it (a no-op otherwise). Use it as a context manager.
    """

    def __init__(self, path: str, what: str = "directory"):
        self.path = path
        self.what = what
        self.lock_path = os.path.join(path, LOCK_NAME)
        self._content: bytes | None = None  # what we wrote, while we hold the lock

    @property
    def held(self) -> bool:
        return self._content is not None

    def acquire(self) -> DirLock:
        if self.held:
            raise RuntimeError(f"{self.lock_path} is already held by this DirLock")
        os.makedirs(self.path, exist_ok=True)
        content = json.dumps(_me(), sort_keys=True).encode()
        deadline = time.monotonic() + 2 * _UNREADABLE_GRACE_S
        while time.monotonic() < deadline:
            if _create(self.lock_path, content):
                self._content = content
                return self
            raw = _read(self.lock_path)
            if raw is None:
                continue  # released between our create and our read: try again
            holder = _parse(raw)
            if holder is None and _age(self.lock_path) < _UNREADABLE_GRACE_S:
                time.sleep(0.05)  # its creator is writing it
                continue
            if holder is not None and _alive(holder):
                raise UserError(self._in_use(holder))
            self._remove_if_unchanged(raw)  # stale: the next pass creates ours
        raise UserError(f"{self.what} {self.path}: could not take its lock {self.lock_path} "
                        f"(other processes keep replacing it)")

    def release(self) -> None:
        if not self.held:
            return
        self._remove_if_unchanged(self._content)
        self._content = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _remove_if_unchanged(self, raw: bytes) -> None:
        """Deletes the lock file if it still holds `raw`. Under a flock of the directory, so
        two takeovers run one after the other: the second finds the first's new lock and
        leaves it. (A plain O_EXCL create cannot race with this: it only succeeds once no lock
        file exists.)"""
        with _flocked(self.path):
            if _read(self.lock_path) == raw:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.lock_path)

    def _in_use(self, holder: dict) -> str:
        host = holder.get("host")
        where = "" if host == socket.gethostname() else f" on host {host}"
        msg = (f"{self.what} {self.path} is in use by pid {holder.get('pid')}{where} "
               f"(started {holder.get('started', '?')})")
        if where:
            return msg + f"; if that run is gone, delete {self.lock_path}"
        return msg + "; wait for it to finish or stop it"


def process_alive(pid: int, host: str | None = None, proc_start: str | None = None) -> bool:
    """Whether a process that recorded (pid, host, proc_start) may still run. A process on
    another host counts as alive (it cannot be checked from here)."""
    if host is not None and host != socket.gethostname():
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc: trust the pid
    state, start = stat
    return state != "Z" and (proc_start is None or start == proc_start)


def _alive(holder: dict) -> bool:
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    return process_alive(pid, holder.get("host"), holder.get("proc_start"))


def _me() -> dict:
    stat = _proc_stat(os.getpid())
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "proc_start": stat[1] if stat else None}


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) from /proc/<pid>/stat, None without it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    return fields[0], fields[19]


def _create(path: str, content: bytes) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _parse(raw: bytes) -> dict | None:
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _age(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


@contextlib.contextmanager
def _flocked(directory: str):
    """An exclusive flock on the directory itself (released by the kernel if we die); where
    the file system has no flock, nothing."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # closing releases the flock
