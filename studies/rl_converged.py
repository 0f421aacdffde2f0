"""Paulus et al.'s self-critical RL from a converged start: the study their Table 1 implies, in
one unattended run on the Debian package descriptions (the headlines) or on the digests.

    python -m studies.rl_converged --data_dir DIR --work_dir runs/rl_converged \
        [--corpus descriptions|digests] [--start_minutes 60] [--grid_minutes 10] \
        [--arm_minutes 60] [--rl_samples 4] [--point LR,GAMMA] [--arms ml,mixed,rl]
    python -m studies.rl_converged --work_dir runs/rl_converged --render

Earlier RL arms here started from a model ML was still improving and ran 20 minutes, so ML
continued won by construction (docs/status.md). This study removes both confounds:

  start   Paulus et al.'s model (the corpus's preset, CORPORA) trained with ML for
          --start_minutes, its best checkpoint chosen by ROUGE-Lsum on the selection pairs. Its
          validation curve is shown with how much the last third of the run still gained
          (`flatness`): RL is meant to start where ML no longer improves.
  grid    the mixed objective (eq. 16, --rl_samples samples an article against their
          leave-one-out mean) from that start for --grid_minutes at every learning rate x
          gamma of GRID (eq. 16's weight on the RL term; the ML term's is 1 - gamma); each
          point scored by its best validation ROUGE-Lsum on the selection pairs only (never on
          the scored pairs), decoded as the table decodes (the preset's beam search, beam 4),
          not greedily. The best point sets the arms' learning rate and gamma; --point
          LR,GAMMA gives them instead (a grid run before, on a start of the same recipe) and
          runs no grid.
  arms    three arms from the start, --arm_minutes each (the same wall-clock budget): ML
          continued; mixed ML + RL (the chosen learning rate and gamma); RL alone (eq. 15,
          gamma = 1, the chosen learning rate), as Table 1's three rows. ML continued resumes
          the start's last checkpoint and optimizer; the grid and the RL arms change the
          objective, a new phase, so they begin from the start's best checkpoint's weights with
          a fresh optimizer (pgn_tf.training), the step counter continuing. --arms runs
          some of them (a study whose other arms ran from an earlier start).

Scored as the corpus's table scores (studies/quality_table.py on the headlines,
studies/digest_table.py on the digests, which adds blocks matched and sentences repeated):
beam 4 on the first --score validation pairs; paired bootstrap (pgn_tf.significance) of each
RL arm against ML continued, and of every arm against the start, on ROUGE-Lsum and on ROUGE-L
(the reward); See et al.'s repetition and novelty beside them (Paulus et al. warn that RL
alone reads worse). Selection and grid use the --select pairs after them.

Every arm selects its checkpoint as the start did, and a new phase's first evaluation is of
the weights it starts from: an arm that never beats the start on the selection pairs is scored
as the start, and the table's "selected step" says so.

Each phase's model dir is kept and a phase that finished is not run again (nor its scoring
redone), so a run stopped midway resumes where it stopped; --stop_after PHASE ends a run
cleanly after one phase (start, grid, ml, mixed, rl), for machines lent for less time than
the whole study. Writes <work_dir>/rl_table.md (partial until the arms are in), rl.json and a
JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from benchmarks.common import cpu_flags, emit
from studies import targets
from studies.digest_table import DigestSettings, DigestTable
from studies.quality_table import Table, TableSettings, event_scalars, set_flags
from studies.resumable import StudyState, run_and_write, selected_step

STAGE = "rl_converged"
# Each corpus's preset, scoring table and defaults: the digests score 600 of their 1,000
# validation digests (as studies.digest_table) and select on the other 400, and start from
# a longer ML run, since their model is still gaining at the hour.
CORPORA = {
    "descriptions": {"preset": "debian_paulus", "table": Table, "settings": TableSettings,
                     "score": 1500, "select": 500,
                     "start_minutes": 60.0},
    "digests": {"preset": "digest_paulus", "table": DigestTable, "settings": DigestSettings,
                "score": 600, "select": 400,
                "start_minutes": 80.0},
}
# The grid the mixed objective's learning rate and gamma (eq. 16's weight on the RL term, the
# ML term's 1 - gamma) are chosen on (selection pairs).
GRID = {"learning_rate": (3e-5, 1e-4, 3e-4), "gamma": (0.9984, 0.99)}
FLAT_GAIN = 0.3  # ROUGE-Lsum points the last third of the start may gain and still be flat
ARMS = ("ML continued", "ML+RL (mixed)", "RL alone")
ARM_DIRS = dict(zip(ARMS, ("ml", "mixed", "rl")))
# The phases in the order they run; --stop_after names one to end the run after it cleanly.
PHASES = ("start", "grid", *ARM_DIRS.values())
# A policy-gradient step costs a few ML steps, so its phases evaluate (and can be selected)
# every this many steps, as the quality table's RL arms; ML keeps the preset's cadence.
RL_EVAL_EVERY = 100


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


def grid_points(learning_rates=GRID["learning_rate"], gammas=GRID["gamma"]) -> list[dict]:
    return [{"learning_rate": lr, "gamma": g}
            for lr, g in itertools.product(learning_rates, gammas)]


def best_point(results: list[dict]) -> dict:
    """The grid point with the highest selection ROUGE-Lsum (the first of equals)."""
    if not results:
        raise ValueError("no grid point finished")
    return max(results, key=lambda r: r["selection_rougeLsum"])


def arm_overrides(arm: str, point: dict, rl_samples: int,
                  rl_eval_every: int = RL_EVAL_EVERY) -> list[str]:
    """The config overrides of one arm (ARMS) from the start; every arm selects its best
    checkpoint by ROUGE-Lsum on the selection pairs, as the start did."""
    if arm == "ML continued":
        return ["train.objective=ml"]
    rl = [f"train.rl_learning_rate={point['learning_rate']}", f"train.rl_samples={rl_samples}",
          f"train.eval_every={rl_eval_every}"]
    if arm == "ML+RL (mixed)":
        return ["train.objective=mixed", f"train.rl_gamma={point['gamma']}", *rl]
    if arm == "RL alone":
        return ["train.objective=rl", *rl]
    raise ValueError(f"unknown arm '{arm}' ({', '.join(ARMS)})")


class Study:
    """The start, the grid and the arms, run through the quality table's runner (the same
    training command, the same scoring), resumable (studies.resumable)."""

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
        results = []
        # --point names the arms' learning rate and gamma (a grid run before): no grid
        for point in [] if a.point else grid_points(a.grid_learning_rates, a.grid_gammas):
            d = w("grid", f"lr{point['learning_rate']:g}_g{point['gamma']:g}")
            t = self.phase(d, a.grid_minutes, arm_overrides(
                "ML+RL (mixed)", point, a.rl_samples, a.rl_eval_every), start=start)
            best = _best_selection_rouge(d, t0["final_step"])
            results.append({**point, "selection_rougeLsum": best, "steps": t["final_step"]})
            self.state["grid"] = results
            self.save()
        chosen = best_point(results) if results else given_point(a.point)
        self.state["chosen"] = chosen
        self.save()
        if self.stop_after("grid"):
            return
        rows = self.state.setdefault("rows", {})
        for arm in [x for x in ARMS if ARM_DIRS[x] in a.arms]:
            d = w("arms", ARM_DIRS[arm])
            t = self.phase(d, a.arm_minutes,
                           arm_overrides(arm, chosen, a.rl_samples, a.rl_eval_every), start=start)
            if not (d in self.reused and arm in rows):
                rows[arm] = self.table.evaluate(
                    f"paulus2017 converged start, {arm}", STAGE, d, train=[t0, t],
                    selected_step=selected_step(d))
            self.save()
            if self.stop_after(ARM_DIRS[arm]):
                return
        self.state["tests"] = compare_arms(
            {k: r["decoded"] for k, r in rows.items() if ARM_DIRS[k] in a.arms},
            self.state["start"]["row"]["decoded"])
        self.save()

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


def given_point(point: tuple[float, ...]) -> dict:
    """The arms' learning rate and gamma from --point LR,GAMMA, marked as given (no grid)."""
    if len(point) != 2:
        raise ValueError(f"--point is LEARNING_RATE,GAMMA, got {len(point)} numbers")
    learning_rate, gamma = point
    if not (learning_rate > 0 and 0 <= gamma <= 1):
        raise ValueError(f"--point needs a learning rate > 0 and 0 <= gamma <= 1, got {point}")
    return {"learning_rate": learning_rate, "gamma": gamma, "given": True}


def selection_beam(preset: str, overrides=()) -> int | str:
    """The beam validation ROUGE decodes with, so the one checkpoint and grid selection read:
    the preset's decode.beam_size under the study's --set (pgn_tf.training.validation decodes
    with the decode config's search; the RL reward's baseline alone is greedy)."""
    from pgn_tf import config as config_lib

    try:
        return config_lib.resolve(preset, list(overrides)).decode.beam_size
    except ValueError:
        return "?"


def compare_arms(decoded: dict[str, str], start: str | None = None) -> dict:
    """Paired bootstrap on ROUGE-Lsum and ROUGE-L (the reward) of each RL arm against ML
    continued, and of each arm against the start it began from (ML continued's test says
    whether ML was still gaining, which an RL arm's gain over the start then includes)."""
    from pgn_tf.metrics import significance

    out = {}
    for arm in ARMS[1:]:
        for metric in ("rougeLsum", "rougeL"):
            if arm in decoded and "ML continued" in decoded:
                out[f"{arm} vs ML continued, {metric}"] = significance.compare(
                    decoded["ML continued"], decoded[arm], metric)
    for arm in ARMS:
        for metric in ("rougeLsum", "rougeL"):
            if arm in decoded and start:
                out[f"{arm} vs the start, {metric}"] = significance.compare(
                    start, decoded[arm], metric)
    return out


def render(state: dict, settings: dict) -> str:
    """rl_table.md: the start's flatness, the grid, the arms with their tests and targets."""
    preset = CORPORA[settings.get("corpus") or "descriptions"]["preset"]
    beam = selection_beam(preset, settings.get("set") or ())
    lines = [f"Paulus et al.'s RL from a converged start ({preset}); start "
             f"{settings.get('start_minutes')} min ML, grid {settings.get('grid_minutes')} min a "
             f"point, arms {settings.get('arm_minutes')} min each, rl_samples "
             f"{settings.get('rl_samples')}; scored on the first {settings.get('score')} "
             f"validation pairs, selected on the {settings.get('select')} after them (beam "
             f"{beam}, as scored); CPU "
             f"flags: {settings.get('cpu_flags') or cpu_flags()}; code: "
             f"{', '.join(state.get('code_versions') or ['?'])}.",
             ""]
    s = state.get("start")
    if s:
        lines += [f"Start: {s.get('points')} validation points; the last third (from minute "
                  f"{s.get('last_third_from_minute')}) gained {s.get('last_third_gain')} "
                  f"ROUGE-Lsum, slope {s.get('slope_per_10_min')} a 10 min: "
                  + {True: "flat", False: "not flat (not the paper's setting)",
                     None: s.get("reason", "unknown")}[s.get("flat")] + ".", ""]
    if s and s.get("row"):
        r = s["row"]
        lines += [f"ML start, scored: ROUGE-1 {r['rouge1']}, ROUGE-2 {r['rouge2']}, ROUGE-Lsum "
                  f"{r['rougeLsum']} ({r.get('train_steps')} steps).", ""]
    if (state.get("chosen") or {}).get("given"):
        c = state["chosen"]
        lines += [f"No grid: learning rate {c['learning_rate']:g} and gamma {c['gamma']:g} "
                  "given (--point).", ""]
    if state.get("grid"):
        lines += [f"| learning rate | gamma (the RL term's weight) | selection ROUGE-Lsum (beam "
                  f"{beam}) | steps |", "|---|---|---|---|"]
        lines += [f"| {g['learning_rate']:g} | {g['gamma']:g} | {g['selection_rougeLsum']} | "
                  f"{g['steps']} |" for g in state["grid"]]
        lines.append("")
    rows = state.get("rows") or {}
    if rows:
        start_step = ((s or {}).get("train") or {}).get("final_step")
        # the digests' rows also measure blocks matched and sentences repeated (digest_table)
        digests = any("block_match_pct" in r for r in rows.values())
        extra_cols = " blocks matched % | sentences repeated % |" if digests else ""
        lines += ["| arm | ROUGE-1 | ROUGE-2 | ROUGE-Lsum | dup 3-gram % | novel 2-gram % | "
                  "outputs repeating a word % |" + extra_cols + " steps | selected step |",
                  "|---|---|---|---|---|---|---|" + "---|---|" * digests + "---|---|"]
        for arm in ARMS:
            r = rows.get(arm)
            if r:
                sel = r.get("selected_step")
                if sel is not None and start_step is not None and sel <= start_step:
                    sel = f"{sel} (the start)"
                lines.append(f"| {arm} | {r['rouge1']} | {r['rouge2']} | {r['rougeLsum']} | "
                             f"{r.get('dup_3gram_pct')} | {r.get('novel_2gram_pct')} | "
                             f"{r.get('repeat_word_outputs_pct')} | "
                             + (f"{r.get('block_match_pct')} | {r.get('repeated_sentence_pct')} | "
                                if digests else "")
                             + f"{r.get('train_steps')} | {sel} |")
        lines.append("")
    for name, test in (state.get("tests") or {}).items():
        ok = test["delta"] > 0 and test["p_value"] < targets.P_VALUE
        verdict = f"above at p < {targets.P_VALUE:g}" if ok else "not shown above"
        lines.append(f"- {name}: delta {test['delta']:+.2f} (95% CI {test['delta_ci95']}), "
                     f"one-sided p = {test['p_value']:.4f}: {verdict}")
    return "\n".join(lines) + "\n"


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got '{text}'") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _arm_list(text: str) -> tuple[str, ...]:
    arms = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in arms if x not in ARM_DIRS.values()]
    if unknown or not arms:
        raise argparse.ArgumentTypeError(
            f"expected arms of {','.join(ARM_DIRS.values())}, got '{text}'")
    return arms


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m studies.rl_converged",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", help="holds train.jsonl.gz and validation.jsonl.gz")
    p.add_argument("--work_dir", default="runs/rl_converged")
    p.add_argument("--corpus", choices=sorted(CORPORA), default="descriptions",
                   help="the headlines (debian_paulus) or the digests (digest_paulus)")
    p.add_argument("--start_minutes", type=float,
                   help="the ML start's budget (default: the corpus's, 60 or 80 minutes)")
    p.add_argument("--grid_minutes", type=float, default=10.0, help="each grid point's budget")
    p.add_argument("--arm_minutes", type=float, default=60.0, help="each arm's budget")
    p.add_argument("--grid_learning_rates", type=_floats, default=GRID["learning_rate"],
                   metavar="LR,LR,...", help="the grid's learning rates (train.rl_learning_rate)")
    p.add_argument("--grid_gammas", type=_floats, default=GRID["gamma"], metavar="G,G,...",
                   help="the grid's gammas (train.rl_gamma: eq. 16's weight on the RL term; "
                        "the ML term's is 1 - gamma)")
    p.add_argument("--rl_samples", type=int, default=4)
    p.add_argument("--rl_eval_every", type=int, default=RL_EVAL_EVERY,
                   help="the RL phases' train.eval_every (ML keeps the preset's)")
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
    p.add_argument("--arms", type=_arm_list, default=tuple(ARM_DIRS.values()),
                   metavar="ARM,...", help="the arms to run, of " + ",".join(ARM_DIRS.values())
                   + " (default: all)")
    p.add_argument("--stop_after", choices=PHASES,
                   help="end the run after this phase (resume later without it)")
    p.add_argument("--render", action="store_true", help="only rewrite rl_table.md")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    for key in ("start_minutes", "score", "select"):
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
            given_point(a.point)
        except ValueError as e:
            raise SystemExit(str(e)) from None
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
                          "tests": study.state.get("tests")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
