"""Peak resident memory (RSS) of this process and of the processes a command starts, read from
Linux's /proc.

Why VmHWM: the kernel keeps each process' RSS high-water mark (`VmHWM` in /proc/PID/status),
kept by the kernel rather than sampled (exact to within its per-thread counter caching, a few
hundred KiB). Reading it while a process lives gives its peak up to that read, so
a watcher that reads the peer's processes every 0.2 s misses at most the last 0.2 s of each
one's life. The alternatives measure less: getrusage(RUSAGE_CHILDREN)'s ru_maxrss is one
maximum over every child ever waited for (onmt_build_vocab, onmt_train and onmt_translate of
one bench.sh run, and this project's own training subprocess, mixed); `/usr/bin/time -v` would
have to wrap the commands inside the peer's bench.sh, which is not this project's to edit.
For this process, writing "5" to /proc/self/clear_refs resets VmHWM to the current RSS
(Linux >= 4.0), so one phase's peak can be read apart from what came before it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def status_kib(pid: int | str = "self", field: str = "VmHWM") -> int | None:
    """A /proc/PID/status memory field in KiB (VmHWM: peak RSS, VmRSS: now); None where the
    process is gone or the field is not there (not Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def peak_mib(pid: int | str = "self") -> float | None:
    kib = status_kib(pid, "VmHWM")
    return None if kib is None else round(kib / 1024, 1)


def reset_peak(pid: int | str = "self") -> bool:
    """Resets the process' VmHWM to its current RSS; False where the kernel does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def children_of(root: int) -> list[int]:
    """Every live descendant of root (from each process' parent in /proc/PID/stat)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found += kids
        frontier += kids
    return found


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [x.decode("utf-8", "replace") for x in f.read().split(b"\0") if x]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


class TreeWatcher:
    """Watches root_pid and the processes under it: every `interval` seconds, each one that
    `classify(argv)` gives a label has its VmHWM read; peaks() is {label: the largest VmHWM
    seen among that label's processes, MiB}.

    with TreeWatcher(proc.pid, classify):  ... proc.wait() ...
    """

    def __init__(self, root_pid: int, classify: Callable[[list[str]], str | None],
                 interval: float = 0.2):
        self.root, self.classify, self.interval = root_pid, classify, interval
        self._peaks: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self) -> None:
        for pid in [self.root, *children_of(self.root)]:
            label = self.classify(command_line(pid))  # each time: a pid can be reused
            kib = status_kib(pid) if label else None
            if kib is not None:
                with self._lock:
                    self._peaks[label] = max(self._peaks.get(label, 0), kib)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> TreeWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self) -> dict[str, float]:
        with self._lock:
            return {label: round(kib / 1024, 1) for label, kib in self._peaks.items()}


def onmt_phase(argv: list[str]) -> str | None:
    """The peer's process kinds: "training" (onmt_train), "decoding" (onmt_translate), else
    None. Its console scripts run as `python .../bin/onmt_train ...`."""
    names = {os.path.basename(a) for a in argv[:2]}
    if "onmt_train" in names:
        return "training"
    if "onmt_translate" in names:
        return "decoding"
    return None
