"""Start serving.server in a child process on free loopback ports (quickstart, benchmarks,
tests)."""

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

