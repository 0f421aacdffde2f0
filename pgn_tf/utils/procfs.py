"""A process' memory and children, and the CPU's flags, read from Linux's /proc: the one reader
the serving tests, the benchmarks, the server's helpers and the precision choice share (it
imports no TensorFlow, so the test runner's second pass reads the flags without it).

Why VmHWM: the kernel keeps each process' RSS high-water mark (`VmHWM` in /proc/PID/status),
kept by the kernel rather than sampled (exact to within its per-thread counter caching, a few
hundred KiB), so an allocation shows in it even once it is freed. Writing "5" to
/proc/PID/clear_refs resets it to the current RSS (Linux >= 4.0), so one phase's peak can be
read apart from what came before it. Every reader returns None (or False) where /proc does not
answer: another OS, a process gone, no permission.
"""

from __future__ import annotations

import functools
import os


@functools.cache
def cpu_flags() -> frozenset[str] | None:
    """The flags of the first CPU in /proc/cpuinfo; None where they cannot be read (macOS)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


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


def memory_mb(pid: int | str = "self") -> dict:
    """{"rss_mb", "peak_rss_mb", "threads"} of a process (VmRSS, VmHWM in MB; its thread
    count); {} where /proc does not answer."""
    keys = {"VmRSS": "rss_mb", "VmHWM": "peak_rss_mb"}
    out: dict = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[keys[key]] = round(int(value.split()[0]) / 1024, 1)
                elif key == "Threads":
                    out["threads"] = int(value)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    return out
