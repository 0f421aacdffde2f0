"""Running commands for the benchmarks: one place that starts them, logs their output, bounds
their time and watches their memory (the quality tables, the peer comparison, the sweeps).

    sh(args, log)              a pgn_tf command (python ARGS), output appended to log
    sh_command(args, log)      any command, output appended to log; RuntimeError with its tail
    run_for(args, seconds, log)  the same, stopped (its whole process group) after `seconds`
    run_watched(cmd)           output echoed, the process tree's peak RSS by phase
    claim_work_dir(dir, corpus)  a peer work dir holds one corpus' data
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from benchmarks import peak_rss


def sh(args: list[str], log: str, env: dict | None = None) -> None:
    """Runs a pgn_tf command, its output to a log file; fails loudly with the log's tail. env:
    variables set for this command only (on top of this process's)."""
    sh_command([sys.executable, *args], log,
               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})))


def sh_command(args: list[str], log: str, **popen) -> None:
    """Runs a command (subprocess.run's keywords in popen), its output appended to a log file;
    RuntimeError with the log's tail when it fails."""
    with open(log, "a") as f:
        f.write("$ " + " ".join(args) + "\n")
        f.flush()
        proc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, **popen)
    if proc.returncode:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{' '.join(args[:3])} failed:\n{tail}")


def run_for(args: list[str], seconds: float, log: str, **popen) -> bool:
    """Runs a command (its output appended to log) until it exits or `seconds` pass; then
    SIGTERM to its process group (it runs in a session of its own, so its workers stop too),
    SIGKILL 60 s later if it is still there. True when the deadline stopped it."""
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
        if not done.wait(60):
            os.killpg(proc.pid, signal.SIGKILL)
            done.wait()
        return True


def claim_work_dir(peer_work: str, corpus: str) -> None:
    """Marks peer_work as holding `corpus`' data; SystemExit when it holds another's (the
    peer's setup rewrites data/ per corpus, and a kept model would be of the other one)."""
    os.makedirs(peer_work, exist_ok=True)
    marker = os.path.join(peer_work, ".pgn_tf_corpus")
    if os.path.exists(marker):
        with open(marker) as f:
            held = f.read().strip()
        if held != corpus:
            raise SystemExit(f"--peer_work {peer_work} holds the {held} corpus; give the "
                             f"{corpus} their own work dir")
    with open(marker, "w") as f:
        f.write(corpus + "\n")


# -- the table ---------------------------------------------------------------------------------


def run_watched(cmd: list[str], **popen) -> tuple[str, int, dict]:
    """Runs one of the peer's commands, echoing its output as it comes, with its process tree's
    peak RSS watched: (output, exit status, {phase: peak MiB} as peak_rss.onmt_phase names
    its processes)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)
    lines = []
    with peak_rss.TreeWatcher(proc.pid, peak_rss.onmt_phase) as watcher:
        for line in proc.stdout:
            print("  peer | " + line, end="", flush=True)
            lines.append(line)
        proc.wait()
    return "".join(lines), proc.returncode, watcher.peaks()
