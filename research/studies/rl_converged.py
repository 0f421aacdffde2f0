"""Paulus et al.'s self-critical RL from a converged start: the study their Table 1 implies, in
one unattended run on the Debian package descriptions (the headlines) or on the digests.

    python -m research.studies.rl_converged --data_dir DIR --work_dir runs/rl_converged \
        [--corpus descriptions|digests] [--start_minutes 60] [--grid_minutes 10] \
        [--arm_minutes 60] [--rl_samples 4] [--point LR,GAMMA] [--control_point LR] \
        [--second_seed 4321] [--arms ml,mixed,rl,control,mixed_seed2,control_seed2]
    python -m research.studies.rl_converged --work_dir runs/rl_converged --render

Earlier RL arms here started from a model ML was still improving and ran 20 minutes, so ML
continued won by construction (docs/status.md). This study removes both confounds:

  start   Paulus et al.'s model (the corpus's preset, CORPORA) trained with ML for
          --start_minutes, its best checkpoint chosen by ROUGE-Lsum on the selection pairs. Its
          validation curve is shown with how much the last third of the run still gained
          (`flatness`): RL is meant to start where ML no longer improves.
  grid    the mixed objective (eq. 16, --rl_samples samples an article against their
          leave-one-out mean) from that start for --grid_minutes at every learning rate x
          gamma of rl_arms.GRID (eq. 16's weight on the RL term; the ML term's is 1 - gamma); each
          point scored by its best validation ROUGE-Lsum on the selection pairs only (never on
          the scored pairs), decoded as the table decodes (the preset's beam search, beam 4),
          not greedily. The best point sets the arms' learning rate and gamma; --point
          LR,GAMMA gives them instead (a grid run before, on a start of the same recipe) and
          runs no grid.
  control the ML control's learning rate: ML from the same best checkpoint, fresh optimizer,
          at every rate of rl_arms.CONTROL_GRID (the RL grid's budget), or --control_point LR.
  arms    the arms of research.studies.rl_arms from the start, --arm_minutes each, in the order
          rl_arms.RUN_ORDER (the control and the RL arms first, ML continued last): the ML
          control (differing from the RL arms in the objective and its grid-chosen learning
          rate), mixed ML + RL and RL alone (Table 1's rows), the mixed arm and the control
          under --second_seed, and ML continued. Every arm but ML continued begins a new phase
          from the start's best checkpoint with a fresh optimizer (pgn_tf.training), the step
          counter continuing. --arms runs some; the tests cover every arm scored in the work
          dir.

Scored as the corpus's table scores (research/studies/quality_table.py on the headlines,
research/studies/digest_table.py on the digests, which adds blocks matched and sentences repeated):
beam 4 on the first --score validation pairs; one-sided paired bootstrap (pgn_tf.significance)
of each RL arm against the control of its seed and against ML continued, of every arm against
the start, and of each seed-2 arm against seed 1 (the spread between seeds), on ROUGE-Lsum and
on ROUGE-L (the reward); every scored arm's decoded outputs kept gzipped in
<work_dir>/decoded/, so any p can be recomputed; See et al.'s repetition and novelty beside
them (Paulus et al. warn that RL alone reads worse). Selection and grids use the --select pairs
after them.

Every arm selects its checkpoint as the start did, and a new phase's first evaluation is of
the weights it starts from: an arm that never beats the start on the selection pairs is scored
as the start, and the table's "selected step" says so.

Each phase's model dir is kept and a phase that finished is not run again (nor its scoring
redone), so a run stopped midway resumes where it stopped; --stop_after PHASE ends a run
cleanly after one phase (PHASES), for machines lent for less time than
the whole study. Writes <work_dir>/measures.md and .json (research.studies.measures_table: every
arm's content-word repeats, novel words and fluency beside ROUGE, each comparison's paired
tests), <work_dir>/rl_table.md (partial until the arms are in;
research.studies.rl_converged_table renders it), rl.json and a JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys

from research.common import emit, event_scalars
from research.studies import measures_table, rl_arms, rl_converged_table
from research.studies.digest_table import DigestSettings, DigestTable
from research.studies.quality_table import Table, TableSettings, set_flags
from research.studies.resumable import StudyState, run_and_write, selected_step
from research.studies.rl_arms import ARM_DIRS, CONTROL_ARMS

STAGE = "rl_converged"
# Each corpus's preset, scoring table and defaults: the digests score 600 of their 1,000
# validation digests (as research.studies.digest_table) and select on the other 400, and start from
# a longer ML run, since their model is still gaining at the hour.
CORPORA = {
    "descriptions": {"preset": "debian_paulus", "table": Table, "settings": TableSettings,
                     "score": 1500, "select": 500,
                     "start_minutes": 60.0, "control_eval_every": 350},
    "digests": {"preset": "digest_paulus", "table": DigestTable, "settings": DigestSettings,
                "score": 600, "select": 400,
                "start_minutes": 80.0, "control_eval_every": 450},
}
# control_eval_every: the ML control's train.eval_every, as many evaluations a minute as the RL
# arms' every 100 steps: ML ran 3.6x the mixed arm's steps/s on the headlines (6.19 against
# 1.71, research/records/2026-11-27-rl-converged-arms.md) and 4.5x on the digests (1.16 against
# 0.26, 2026-11-27-rl-converged-digests-ml-and-mixed-arms.md).
FLAT_GAIN = 0.3  # ROUGE-Lsum points the last third of the start may gain and still be flat
# The phases in the order they run; --stop_after names one to end the run after it cleanly.
PHASES = ("start", "grid", "control_grid", *(ARM_DIRS[x] for x in rl_arms.RUN_ORDER))


def flatness(curve: list[dict], key: str = "rougeLsum") -> dict:
    """How much a validation curve (quality_table's `curves` rows: minutes, step, key) still
    gained in its last third: the best value there minus the best before it, and the slope of
    a least-squares line through the last third (points per 10 minutes). Flat: a gain below
    FLAT_GAIN."""
    points = [(c["minutes"], c[key]) for c in curve if key in c]
    if len(points) < 3:
        return {"points": len(points), "flat": None,
                "reason": "fewer than 3 validation ROUGE points"}
    end = points[-1][0]
    cut = points[0][0] + 2 * (end - points[0][0]) / 3
    early = [v for m, v in points if m < cut] or [points[0][1]]
    late = [(m, v) for m, v in points if m >= cut]
    gain = max(v for _, v in late) - max(early)
    slope = 0.0
    if len(late) > 1:
        mx = sum(m for m, _ in late) / len(late)
        my = sum(v for _, v in late) / len(late)
        var = sum((m - mx) ** 2 for m, _ in late)
        slope = 10 * sum((m - mx) * (v - my) for m, v in late) / var if var else 0.0
    return {"points": len(points), "last_third_from_minute": round(cut, 1),
            "last_third_gain": round(gain, 2), "slope_per_10_min": round(slope, 2),
            "flat": gain < FLAT_GAIN}


class Study:
    """The start, the grid and the arms, run through the quality table's runner (the same
    training command, the same scoring), resumable (research.studies.resumable)."""

    def __init__(self, a):
        self.a = a
        self.preset = CORPORA[a.corpus]["preset"]
        corpus = CORPORA[a.corpus]
        self.table = corpus["table"](corpus["settings"](
            work_dir=a.work_dir, data_dir=a.data_dir, score=a.score, overrides=a.set))
        self.run_state = StudyState(self.table, "rl.json", a.stop_after, "rl_converged")
        self.state = self.run_state.state
        self.reused = self.run_state.reused
        self.save = self.run_state.save
        self.stop_after = self.run_state.stop_after

    def selection(self) -> list[str]:
        return ["--set", "train.select_by=rouge", "--set", "train.select_rouge=rougeLsum",
                "--set", f"train.eval_rouge_examples={self.a.select}"]

    def phase(self, d: str, minutes: float, overrides=(), start: str | None = None) -> dict:
        """One training phase of the corpus's preset in d, selected on the selection pairs."""
        return self.run_state.phase(d, self.preset, minutes,
                                    [*self.selection(), *set_flags(overrides)], start)

    def run(self) -> None:
        a, w = self.a, self.table.w
        start = w("start")
        t0 = self.phase(start, a.start_minutes)
        curve = self.table.curves(start)
        row = (self.state.get("start") or {}).get("row") if start in self.reused else None
        self.state["start"] = {"train": t0, "curve": curve, **flatness(curve)}
        self.save()
        self.state["start"]["row"] = row or self.table.evaluate(
            "paulus2017 converged start, ML start", STAGE, start, train=[t0])
        self.save()
        print(f"[rl_converged] start: {self.state['start']}", flush=True)
        if self.stop_after("start"):
            return
        runs_rl = [x for x in a.arms if x not in CONTROL_ARMS and x != "ml"]
        chosen = self.state.get("chosen")
        if runs_rl:
            chosen = self.rl_grid(start, t0) if not a.point else rl_arms.given_point(a.point)
            self.state["chosen"] = chosen
            self.save()
        if self.stop_after("grid"):
            return
        control_rate = None
        if any(x in CONTROL_ARMS for x in a.arms):
            control_rate = self.control_grid(start, t0)
        if self.stop_after("control_grid"):
            return
        rows = self.state.setdefault("rows", {})
        for arm in [x for x in rl_arms.RUN_ORDER if ARM_DIRS[x] in a.arms]:
            d = w("arms", ARM_DIRS[arm])
            t = self.phase(d, a.arm_minutes, rl_arms.arm_overrides(
                arm, chosen, a.rl_samples, a.rl_eval_every, control_rate, a.second_seed,
                a.control_eval_every), start=start)
            if not (d in self.reused and arm in rows):
                rows[arm] = self.table.evaluate(
                    f"paulus2017 converged start, {arm}", STAGE, d, train=[t0, t],
                    selected_step=selected_step(d))
            rows[arm]["decoded_kept"] = self.keep_decoded(rows[arm], ARM_DIRS[arm])
            self.save()
            if self.stop_after(ARM_DIRS[arm]):
                return
        start_row = self.state["start"]["row"]
        start_row["decoded_kept"] = self.keep_decoded(start_row, "start")
        # every arm scored in this work dir, by this run or an earlier one with other --arms
        for arm, r in rows.items():
            r["decoded_kept"] = self.keep_decoded(r, ARM_DIRS[arm])
        self.state["tests"] = rl_arms.compare_arms(
            {k: w(r["decoded_kept"]) for k, r in rows.items()}, w(start_row["decoded_kept"]))
        # the measures RL is not trained on, each with its paired test: measures.md, .json
        measures_table.write_table(a.work_dir, a.data_dir,
                                   measures_table.present(measures_table.DEFAULT_COMPARE,
                                                          a.work_dir))
        self.save()

    def rl_grid(self, start: str, t0: dict) -> dict:
        """The mixed objective at every point of the RL grid for --grid_minutes -> the best."""
        a, results = self.a, []
        for point in rl_arms.grid_points(a.grid_learning_rates, a.grid_gammas):
            d = self.table.w("grid", f"lr{point['learning_rate']:g}_g{point['gamma']:g}")
            t = self.phase(d, a.grid_minutes, rl_arms.arm_overrides(
                "ML+RL (mixed)", point, a.rl_samples, a.rl_eval_every), start=start)
            best = _best_selection_rouge(d, t0["final_step"])
            results.append({**point, "selection_rougeLsum": best, "steps": t["final_step"]})
            self.state["grid"] = results
            self.save()
        return rl_arms.best_point(results)

    def control_grid(self, start: str, t0: dict) -> float:
        """The ML control's learning rate: --control_point, or the best of a grid with the RL
        grid's budget (a point a learning rate, --grid_minutes each, the same selection)."""
        a = self.a
        if a.control_point:
            self.state["control_chosen"] = {"learning_rate": a.control_point, "given": True}
            self.save()
            return a.control_point
        results = []
        for lr in a.control_learning_rates:
            d = self.table.w("control_grid", f"lr{lr:g}")
            t = self.phase(d, a.grid_minutes, rl_arms.control_overrides(
                lr, a.control_eval_every), start=start)
            results.append({"learning_rate": lr, "gamma": 0.0, "steps": t["final_step"],
                            "selection_rougeLsum": _best_selection_rouge(d, t0["final_step"])})
            self.state["control_grid"] = results
            self.save()
        chosen = rl_arms.best_point(results)
        self.state["control_chosen"] = {"learning_rate": chosen["learning_rate"]}
        self.save()
        return chosen["learning_rate"]

    def keep_decoded(self, row: dict, name: str) -> str:
        """A scored arm's decoded outputs gzipped as decoded/NAME.jsonl.gz in the work dir (kept
        with the record, so any p-value can be recomputed) -> that path, relative."""
        rel = os.path.join("decoded", f"{name}.jsonl.gz")
        path = self.table.w(rel)
        if row.get("decoded_kept") == rel and os.path.exists(path):
            return rel
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(row["decoded"], "rb") as src, gzip.GzipFile(path, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        return rel

    def render(self) -> str:
        return render(self.state, self.state.get("settings", vars(self.a)))


def _best_selection_rouge(model_dir: str, after_step: int) -> float:
    """The highest validation ROUGE-Lsum (selection pairs) a phase's evals logged after
    `after_step` (the start's: its own evaluation of the start's weights is not the point's)."""
    ev = event_scalars(os.path.join(model_dir, "eval"), ("rougeLsum",))["rougeLsum"]
    values = [v for _, step, v in ev if step > after_step]
    if not values:
        raise RuntimeError(f"{model_dir} logged no validation ROUGE-Lsum after step "
                           f"{after_step}: give the grid more minutes or evaluate more often "
                           "(train.eval_every)")
    return round(max(values), 2)


def render(state: dict, settings: dict) -> str:
    """rl_table.md (research.studies.rl_converged_table) under the preset of the study's corpus."""
    preset = CORPORA[settings.get("corpus") or "descriptions"]["preset"]
    return rl_converged_table.render(state, settings, preset)


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got '{text}'") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m research.studies.rl_converged",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", help="holds train.jsonl.gz and validation.jsonl.gz")
    p.add_argument("--work_dir", default="runs/rl_converged")
    p.add_argument("--corpus", choices=sorted(CORPORA), default="descriptions",
                   help="the headlines (debian_paulus) or the digests (digest_paulus)")
    p.add_argument("--start_minutes", type=float,
                   help="the ML start's budget (default: the corpus's, 60 or 80 minutes)")
    p.add_argument("--grid_minutes", type=float, default=10.0, help="each grid point's budget")
    p.add_argument("--arm_minutes", type=float, default=60.0, help="each arm's budget")
    p.add_argument("--grid_learning_rates", type=_floats,
                   default=rl_arms.GRID["learning_rate"],
                   metavar="LR,LR,...", help="the grid's learning rates (train.rl_learning_rate)")
    p.add_argument("--grid_gammas", type=_floats, default=rl_arms.GRID["gamma"],
                   metavar="G,G,...",
                   help="the grid's gammas (train.rl_gamma: eq. 16's weight on the RL term; "
                        "the ML term's is 1 - gamma)")
    p.add_argument("--rl_samples", type=int, default=4)
    p.add_argument("--rl_eval_every", type=int, default=rl_arms.RL_EVAL_EVERY,
                   help="the RL phases' train.eval_every (ML continued keeps the preset's)")
    p.add_argument("--control_eval_every", type=int,
                   help="the ML control's train.eval_every (default: the corpus's, as many "
                        "evaluations a minute as the RL arms)")
    p.add_argument("--score", type=int,
                   help="validation pairs scored (default: the corpus's, 1500 or 600)")
    p.add_argument("--select", type=int,
                   help="validation pairs after them that select checkpoints and the grid point "
                        "(default: the corpus's, 500 or 400)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every phase (recorded in rl.json)")
    p.add_argument("--point", type=_floats, metavar="LR,GAMMA",
                   help="the arms' learning rate and gamma, chosen by a grid run before: "
                        "no grid is run")
    p.add_argument("--control_learning_rates", type=_floats, default=rl_arms.CONTROL_GRID,
                   metavar="LR,LR,...", help="the ML control's grid (train.learning_rate); "
                   "default: as many points as the RL grid")
    p.add_argument("--control_point", type=float, metavar="LR",
                   help="the ML control's learning rate, chosen before: no control grid")
    p.add_argument("--second_seed", type=int, default=rl_arms.SECOND_SEED,
                   help="train.seed of the seed-2 arms (data order and sampling)")
    p.add_argument("--arms", type=rl_arms.parse_arms, default=rl_arms.DEFAULT_ARMS,
                   metavar="ARM,...", help="the arms to run, of " + ",".join(ARM_DIRS.values())
                   + " (default: all)")
    p.add_argument("--stop_after", choices=PHASES,
                   help="end the run after this phase (resume later without it)")
    p.add_argument("--allow_cpu_change", action="store_true",
                   help="resume on a machine whose CPU flags differ from the study's first run "
                        "(refused otherwise: its phases are timed); the table names each "
                        "phase's flags")
    p.add_argument("--render", action="store_true", help="only rewrite rl_table.md")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    for key in ("start_minutes", "score", "select", "control_eval_every"):
        if getattr(a, key) is None:
            setattr(a, key, CORPORA[a.corpus][key])
    if not a.render and not a.data_dir:
        raise SystemExit("--data_dir is required unless --render")
    if a.rl_samples < 2:
        raise SystemExit("--rl_samples must be at least 2 (the leave-one-out baseline)")
    if a.stop_after in ARM_DIRS.values() and a.stop_after not in a.arms:
        raise SystemExit(f"--stop_after {a.stop_after} names an arm --arms does not run")
    if a.point:
        try:
            rl_arms.given_point(a.point)
        except ValueError as e:
            raise SystemExit(str(e)) from None
    if a.control_point is not None and not a.control_point > 0:
        raise SystemExit(f"--control_point needs a learning rate > 0, got {a.control_point}")
    if a.stop_after == "grid" and not set(a.arms) - {"ml", *CONTROL_ARMS}:
        raise SystemExit("--stop_after grid: --arms runs no RL arm, so there is no RL grid")
    if a.stop_after == "control_grid" and not set(a.arms) & set(CONTROL_ARMS):
        raise SystemExit("--stop_after control_grid: --arms runs no ML control")
    study = Study(a)
    before = (study.state.get("settings") or {}).get("corpus", "descriptions")
    if not a.render and study.state.get("settings") and before != a.corpus:
        raise SystemExit(f"{a.work_dir} holds a study of the {before}; use another --work_dir "
                         f"for the {a.corpus}")
    run_and_write(a, study, "rl_table.md", study.render)
    emit("rl_converged", {"settings": study.state.get("settings"),
                          "code_versions": study.state.get("code_versions"),
                          "start": {k: v for k, v in (study.state.get("start") or {}).items()
                                    if k != "curve"},
                          "grid": study.state.get("grid"), "chosen": study.state.get("chosen"),
                          "control_grid": study.state.get("control_grid"),
                          "control_chosen": study.state.get("control_chosen"),
                          "tests": study.state.get("tests")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
