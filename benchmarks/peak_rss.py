"""Peak resident memory (RSS) of the processes a command starts: a watcher over a process tree
(pgn_tf.utils.procfs reads /proc and says why VmHWM), and `run_watched`, which runs one of the
reference system's commands under it.

The alternatives measure less: getrusage(RUSAGE_CHILDREN)'s ru_maxrss is one maximum over every
child ever waited for (onmt_build_vocab, onmt_train and onmt_translate of one bench.sh run, and
this project's own training subprocess, mixed); `/usr/bin/time -v` would have to wrap the
commands inside the peer's bench.sh, which is not this project's to edit. A watcher that reads
the peer's processes every 0.2 s misses at most the last 0.2 s of each one's life.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable

from pgn_tf.utils.procfs import children_of, command_line, status_kib


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


def run_watched(cmd: list[str], **popen) -> tuple[str, int, dict]:
    """Runs one of the peer's commands, echoing its output as it comes, with its process tree's
    peak RSS watched: (output, exit status, {phase: peak MiB} as onmt_phase names its
    processes)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)
    lines = []
    with TreeWatcher(proc.pid, onmt_phase) as watcher:
        for line in proc.stdout:
            print("  peer | " + line, end="", flush=True)
            lines.append(line)
        proc.wait()
    return "".join(lines), proc.returncode, watcher.peaks()
