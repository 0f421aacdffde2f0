"""Resumable studies: hours of training phases run through the quality table's runner, each
phase's model dir kept, so a run stopped midway (a machine lent for less time than the study)
resumes where it stopped.

    state = StudyState(table, "rl.json", stop_after="grid")
    result = state.phase(model_dir, preset, minutes, flags, start=start_dir)
    if state.stop_after("grid"): return

A phase that finished (its `phase_done` marker beside `train_result.json`) is never trained
again, and its scoring is reused when the state file holds it (`reused`). Used by
research.studies.rl_converged and research.studies.abs_study.

Phases are timed (minutes, not steps), so a phase trained on another CPU type gets another
number of steps than the phases it is compared with: a resumed run on a machine whose CPU flags
differ from the study's first run is refused unless its settings allow it (`allow_cpu_change`),
and every phase records the flags it was trained under (`cpu_line` names them in a table).
"""

from __future__ import annotations

import json
import os
import shutil

from research.common import code_version, cpu_flags

DONE = "phase_done"


class StudyState:
    """A study's state file (JSON, in the table's work dir) and its phases."""

    def __init__(self, table, name: str, stop_after: str | None = None, label: str = "study"):
        self.table = table
        self.path = table.w(name)
        self.label = label
        self._stop_after = stop_after
        self.state: dict = {}
        self.reused: set[str] = set()  # phases finished by an earlier run
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.state = json.load(f)

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump(self.state, f, indent=2)

    def begin(self, settings: dict) -> None:
        """Records this run's settings, its code and its CPU flags, after every earlier run's (a
        resumed run may run newer code for its rest). Refuses (SystemExit, nothing written) a
        machine whose CPU flags differ from the study's first run unless
        settings["allow_cpu_change"]."""
        flags = settings.get("cpu_flags")
        first = study_cpu_flags(self.state)
        if first is not None and flags != first and not settings.get("allow_cpu_change"):
            raise SystemExit(
                f"{self.path}: this study's phases so far ran on a CPU with flags '{first}'; "
                f"this machine's are '{flags}'. Its phases are timed, so one trained here gets "
                "another number of steps than those it is compared with. Resume it on a machine "
                "of the same CPU type, or pass --allow_cpu_change (each phase's flags are then "
                "named in the table).")
        if first is not None and not self.state.get("runs"):  # a state file from before runs
            # were listed: its settings are its last run's, the only flags known
            self.state["runs"] = [{"code": (self.state.get("code_versions") or ["?"])[-1],
                                   "cpu_flags": first}]
        code = code_version()
        self.state["code_versions"] = [*self.state.get("code_versions", []), code]
        self.state["runs"] = [*self.state.get("runs", []), {"code": code, "cpu_flags": flags}]
        self.state["settings"] = settings
        self.save()

    def phase(self, d: str, preset: str, minutes: float, flags=(),
              start: str | None = None) -> dict:
        """One training phase in d (a copy of the model dir `start` first, when given), or its
        result if it finished before. A d left by a phase that did not finish is removed first."""
        done = os.path.join(d, "train_result.json")
        if os.path.exists(done) and os.path.exists(os.path.join(d, DONE)):
            with open(done) as f:
                print(f"[{self.label}] {d}: finished before, reused", flush=True)
                self.reused.add(d)
                return json.load(f)
        # a phase stopped midway starts again from scratch: resuming its checkpoint would give
        # it more than its budget
        shutil.rmtree(d, ignore_errors=True)
        if start:
            # the start's result is not this phase's: a phase must write its own
            shutil.copytree(start, d, ignore=shutil.ignore_patterns("eval_*", DONE,
                                                                   "train_result.json"))
        result = self.table.train_phase(d, preset, minutes, list(flags))
        with open(os.path.join(d, DONE), "w") as f:
            f.write("done\n")
        phases = self.state.setdefault("phase_cpu_flags", {})
        phases[os.path.relpath(d, self.table.w())] = cpu_flags()
        self.save()
        return result

    def stop_after(self, phase: str) -> bool:
        """Whether the run was asked to end after `phase` (it says so)."""
        if self._stop_after != phase:
            return False
        print(f"[{self.label}] stopped after {phase} (--stop_after); the same command without "
              "it resumes", flush=True)
        return True


def study_cpu_flags(state: dict) -> str | None:
    """The CPU flags of a study's first run (None before one): its phases' CPU type."""
    runs = state.get("runs")
    if runs:
        return runs[0].get("cpu_flags")
    # a state file written before runs were listed holds its last run's settings only
    return (state.get("settings") or {}).get("cpu_flags")


def cpu_line(state: dict) -> str:
    """'CPU flags: ...' for a study's table: one CPU type, or each phase's where they differ
    (a timed phase's steps depend on it)."""
    phases = state.get("phase_cpu_flags") or {}
    kinds = set(phases.values()) | {study_cpu_flags(state)}  # the first run's: the start's
    kinds.discard(None)
    if len(kinds) <= 1:
        one = next(iter(kinds), None) or cpu_flags()
        return f"CPU flags: {one}"
    return ("CPU flags differ between phases (timed phases: their steps are not comparable "
            "across CPU types): " + "; ".join(f"{d}: {f}" for d, f in sorted(phases.items()))
            + f"; any phase not named: {study_cpu_flags(state)}")


def run_and_write(a, study, name: str, render) -> str:
    """A study command's body: runs `study` (unless --render) with its flags, CPU flags and code
    recorded first, then writes render() to <work_dir>/name, prints it and returns it."""
    if not a.render:
        study.run_state.begin({**vars(a), "cpu_flags": cpu_flags()})
        study.run()
    md = render()
    with open(study.table.w(name), "w") as f:
        f.write(md)
    print(md)
    return md


def selected_step(model_dir: str) -> int | None:
    """The step of the checkpoint a training phase selected (its best.json), None before one.
    A new phase's first evaluation is of the weights it starts from, so a phase that never beat
    them names its start's step. Read as a file here (pgn_tf.model_dir.ModelDir.read_best
    also checks the checkpoint, and imports TensorFlow to do it)."""
    path = os.path.join(model_dir, "best", "best.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("step")
