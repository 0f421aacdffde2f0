"""Start serving.server in a child process on free loopback ports (quickstart, benchmarks,
tests), and read a process's memory from /proc (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the child runs this code


def start_server(base_path: str, model_name: str, extra_args: list[str] | None = None,
                 timeout: float = 120.0) -> tuple[subprocess.Popen, int, int]:
    """Returns (process, gRPC port, REST port) once the server prints READY."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgn_tf.serving.server", "--model_name", model_name,
         "--model_base_path",
         base_path, "--port", "0", "--rest_api_port", "auto", *(extra_args or [])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
            p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)),
    )
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("READY"):
            fields = dict(kv.split("=") for kv in line.split()[1:])
            return proc, int(fields["grpc"]), int(fields["rest"])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("serving.server did not start")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def memory_mb(pid: int) -> dict:
    """{"rss_mb", "peak_rss_mb", "threads"} of a process, from /proc/PID/status (VmRSS, VmHWM:
    the kernel's resident-set peak, which shows an allocation even once it is freed)."""
    keys = {"VmRSS": "rss_mb", "VmHWM": "peak_rss_mb"}
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in keys:
                out[keys[key]] = round(int(value.split()[0]) / 1024, 1)
            elif key == "Threads":
                out["threads"] = int(value)
    return out


def reset_peak_rss(pid: int) -> bool:
    """Sets a process's VmHWM back to its current RSS (Linux 4.0+, /proc/PID/clear_refs "5"), so
    the next peak measures only what follows; False where the kernel or permissions refuse."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
