"""What the studies share beside the library: their figures' printout, the CPU flags and code
version their records name, the pgn_tf commands they run, and the reading of what those commands
wrote (an evaluation's metrics, a training run's TensorBoard scalars).

The machine's words come from pgn_tf.utils.machine and the child processes from
pgn_tf.utils.child_process, as the speed tools in benchmarks/ take them: research imports the
library, never benchmarks/ (tests/research/test_layering.py).
"""

from __future__ import annotations

import json
import os

from pgn_tf.utils import child_process, machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_flags() -> str:
    """The CPU's vector extensions and any emulation in force, as every record names them."""
    return machine.cpu_flags_text()


def code_version() -> str:
    """This checkout's commit ("+changes" when its work tree differs), for a study's record."""
    return machine.code_version(ROOT)


def emit(name: str, result: dict) -> None:
    """Prints a study's figures readably (with the CPU's flags), then one JSON line for tools:
    {"study": name, ...figures, ...the machine}."""
    print("\n".join(machine.report_lines("study", name, result)), flush=True)


def sh(args: list[str], log: str, env: dict[str, str] | None = None) -> None:
    """Runs a pgn_tf command (`python ARGS`, e.g. ["-m", "pgn_tf.train", ...]) in a child
    process, its output appended to log; RuntimeError with the log's tail when it fails. env:
    variables set for this command only, on top of this process's.

    A child process on purpose, not the library's function in the study's own process:

    - each phase and arm starts fresh, so one's process-wide state cannot colour the next
      (Keras's mixed-precision policy, the logical devices and strategy, the caches of
      tf.function and XLA, thread pools), and memory does not pile up over hours (a phase's
      training, the weights and traced searches of the dozens of models a study decodes);
    - a phase's time budget (train.max_minutes) runs on the child's own clock, from its start;
    - an arm's caps (a CPU type's oneDNN ISA) take effect only in a process started under them,
      and every command starts as a user's does (TensorFlow's oneDNN setting,
      pgn_tf.utils.onednn), so its figures are the commands' figures;
    - a phase that dies leaves the study standing, and a killed study resumes from the phases
      that finished (research/studies/resumable.py).
    """
    child_process.run_python(args, log, env)


def read_metrics(out_dir: str) -> dict | None:
    """The metrics `pgn_tf.evaluate --output_dir out_dir` wrote (metrics_<name>.json), or None
    where it has not written them."""
    found = sorted(f for f in os.listdir(out_dir) if f.startswith("metrics_")) \
        if os.path.isdir(out_dir) else []
    if not found:
        return None
    with open(os.path.join(out_dir, found[0])) as f:
        return json.load(f)


def event_scalars(log_dir: str, tags: tuple) -> dict:
    """{tag: [(wall_time, step, value)]} from a TensorBoard log dir."""
    import tensorflow as tf

    out: dict = {t: [] for t in tags}
    for fn in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.*"))):
        for e in tf.compat.v1.train.summary_iterator(fn):
            for v in e.summary.value:
                if v.tag in out:
                    value = (float(tf.make_ndarray(v.tensor)) if v.HasField("tensor")
                             else v.simple_value)
                    out[v.tag].append((e.wall_time, e.step, value))
    return out
