"""The arms of the converged-start RL study (research.studies.rl_converged): what each one trains, the
grids that choose their learning rates, and the paired tests between them.

Every arm starts from the same ML start and trains for the same minutes:

  ML continued      resumes the start's last checkpoint and its optimizer, at the preset's
                    learning rate (what "more ML" means to a user who keeps training).
  ML+RL (mixed)     eq. 16 from the start's best checkpoint, fresh optimizer, the RL grid's
                    learning rate and gamma.
  RL alone          eq. 15 (gamma = 1) from the same checkpoint, the RL grid's learning rate.
  ML control        ML from the same best checkpoint with a fresh optimizer (train.phase_name
                    starts the new phase), at the learning rate the control grid chose: the same
                    number of points and minutes as the RL grid, on the same selection pairs,
                    evaluated (and so selectable) as often a minute as the RL arms. The RL arms
                    differ from it in the objective and the learning rate each side's grid chose.
  ..., seed 2       the mixed arm and the control again with train.seed = --second_seed (data
                    order and sampling), from the same start: the spread between two runs of
                    one arm, to set beside the deltas between arms.

Paired bootstrap (pgn_tf.metrics.significance, one-sided: p is the share of resamples in which
the second system's mean is not above the first's) of each RL arm against the control of its
seed and against ML continued, of every arm against the start, and of each seed-2 arm against
its seed-1 twin (there the delta is what is read: the spread between two runs of one arm).
"""

from __future__ import annotations

import argparse
import itertools

# The grid the mixed objective's learning rate and gamma (eq. 16's weight on the RL term, the
# ML term's 1 - gamma) are chosen on (selection pairs).
GRID = {"learning_rate": (3e-5, 1e-4, 3e-4), "gamma": (0.9984, 0.99)}
# The ML control's learning rates: as many points as GRID (the same budget at --grid_minutes a
# point), from below the RL arms' rates up to the preset's 1e-3.
CONTROL_GRID = (1e-5, 3e-5, 1e-4, 3e-4, 6e-4, 1e-3)
SECOND_SEED = 4321  # the presets train with seed 1234
CONTROL = "ML control"
ARMS = ("ML continued", "ML+RL (mixed)", "RL alone", CONTROL,
        "ML+RL (mixed), seed 2", f"{CONTROL}, seed 2")
ARM_DIRS = dict(zip(ARMS, ("ml", "mixed", "rl", "control", "mixed_seed2", "control_seed2")))
# The order the arms run in: the control and the RL arms it is compared with first, ML continued
# (the older baseline) last, so a study stopped by a machine's time limit loses the least.
RUN_ORDER = (CONTROL, "ML+RL (mixed)", "RL alone", "ML+RL (mixed), seed 2", f"{CONTROL}, seed 2",
             "ML continued")
DEFAULT_ARMS = tuple(ARM_DIRS.values())
CONTROL_ARMS = ("control", "control_seed2")
# A policy-gradient step costs a few ML steps, so its phases evaluate (and can be selected)
# every this many steps, as the quality table's RL arms; ML continued keeps the preset's
# cadence, and the control evaluates as often a minute as the RL arms (the corpus's
# control_eval_every, research.studies.rl_converged.CORPORA).
RL_EVAL_EVERY = 100
# (arm, the arm it is tested against): each RL arm against the control of its seed and against
# ML continued; each seed-2 arm against its seed-1 twin (the spread between seeds).
AGAINST_CONTROL = (("ML+RL (mixed)", CONTROL), ("RL alone", CONTROL),
                   ("ML+RL (mixed), seed 2", f"{CONTROL}, seed 2"))
AGAINST_ML = (("ML+RL (mixed)", "ML continued"), ("RL alone", "ML continued"))
BETWEEN_SEEDS = (("ML+RL (mixed), seed 2", "ML+RL (mixed)"),
                 (f"{CONTROL}, seed 2", CONTROL))
METRICS = ("rougeLsum", "rougeL")  # rougeL: the reward


def seed_of(arm: str) -> int:
    return 2 if arm.endswith(", seed 2") else 1


def parse_arms(text: str) -> tuple[str, ...]:
    """--arms: arm dirs (ARM_DIRS' values) separated by commas; an argparse type."""
    arms = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in arms if x not in ARM_DIRS.values()]
    if unknown or not arms:
        raise argparse.ArgumentTypeError(
            f"expected arms of {','.join(ARM_DIRS.values())}, got '{text}'")
    return arms


def grid_points(learning_rates=GRID["learning_rate"], gammas=GRID["gamma"]) -> list[dict]:
    return [{"learning_rate": lr, "gamma": g}
            for lr, g in itertools.product(learning_rates, gammas)]


def best_point(results: list[dict]) -> dict:
    """The grid point with the highest selection ROUGE-Lsum (the first of equals)."""
    if not results:
        raise ValueError("no grid point finished")
    return max(results, key=lambda r: r["selection_rougeLsum"])


def given_point(point: tuple[float, ...]) -> dict:
    """The arms' learning rate and gamma from --point LR,GAMMA, marked as given (no grid)."""
    if len(point) != 2:
        raise ValueError(f"--point is LEARNING_RATE,GAMMA, got {len(point)} numbers")
    learning_rate, gamma = point
    if not (learning_rate > 0 and 0 <= gamma <= 1):
        raise ValueError(f"--point needs a learning rate > 0 and 0 <= gamma <= 1, got {point}")
    return {"learning_rate": learning_rate, "gamma": gamma, "given": True}


def control_overrides(learning_rate: float, eval_every: int) -> list[str]:
    """ML from the start's best checkpoint with a fresh optimizer: a new train.phase_name (the
    objective stays ml) at `learning_rate`, evaluating every `eval_every` steps (the corpus's
    CONTROL_EVAL_EVERY: as many evaluations a minute as the RL arms', since evaluations are
    both what selection picks from and time taken from the budget)."""
    return ["train.objective=ml", "train.phase_name=control",
            f"train.learning_rate={learning_rate}", f"train.eval_every={eval_every}"]


def arm_overrides(arm: str, point: dict, rl_samples: int, rl_eval_every: int = RL_EVAL_EVERY,
                  control_rate: float | None = None, second_seed: int = SECOND_SEED,
                  control_eval_every: int | None = None) -> list[str]:
    """The config overrides of one arm (ARMS) from the start; every arm selects its best
    checkpoint by ROUGE-Lsum on the selection pairs, as the start did."""
    if arm not in ARM_DIRS:
        raise ValueError(f"unknown arm '{arm}' ({', '.join(ARMS)})")
    seed = [f"train.seed={second_seed}"] if seed_of(arm) == 2 else []
    base = arm.removesuffix(", seed 2")
    if base == "ML continued":
        return ["train.objective=ml"]
    if base == CONTROL:
        if control_rate is None or control_eval_every is None:
            raise ValueError("the ML control needs its learning rate (the control grid's) and "
                             "its evaluation cadence")
        return [*control_overrides(control_rate, control_eval_every), *seed]
    rl = [f"train.rl_learning_rate={point['learning_rate']}", f"train.rl_samples={rl_samples}",
          f"train.eval_every={rl_eval_every}"]
    if base == "ML+RL (mixed)":
        return ["train.objective=mixed", f"train.rl_gamma={point['gamma']}", *rl, *seed]
    return ["train.objective=rl", *rl]


def compare_arms(decoded: dict[str, str], start: str | None = None) -> dict:
    """Paired bootstrap on ROUGE-Lsum and ROUGE-L (the reward) between the arms whose decoded
    outputs are given (arm -> decoded.jsonl[.gz]): AGAINST_CONTROL, AGAINST_ML, BETWEEN_SEEDS,
    and every arm against the start it began from (ML continued's test says whether ML was
    still gaining, which an RL arm's gain over the start then includes). Keys: "B vs A,
    metric"; a positive delta is B above A."""
    from pgn_tf.metrics import significance

    out = {}
    for b, a in (*AGAINST_CONTROL, *AGAINST_ML, *BETWEEN_SEEDS):
        if a in decoded and b in decoded:
            for metric in METRICS:
                out[f"{b} vs {a}, {metric}"] = significance.compare(decoded[a], decoded[b], metric)
    for arm in ARMS:
        if arm in decoded and start:
            for metric in METRICS:
                out[f"{arm} vs the start, {metric}"] = significance.compare(
                    start, decoded[arm], metric)
    return out


def control_table(tests: dict, p_value: float) -> list[str]:
    """The table of the RL arms against the control, each seed, with the spread between the
    seeds' runs of one arm beside the deltas (markdown lines; none without a control test)."""
    rows = [(b, a) for b, a in AGAINST_CONTROL if f"{b} vs {a}, rougeLsum" in tests]
    if not rows:
        return []

    def spread(row: tuple[str, str], metric: str) -> str:
        """The seed spread of each of the row's two arms (an arm run under one seed says so)."""
        parts = []
        for arm in (x.removesuffix(", seed 2") for x in row):
            k = f"{arm}, seed 2 vs {arm}, {metric}"
            parts.append(f"{arm} {tests[k]['delta']:+.2f}" if k in tests else f"{arm} (one seed)")
        return "; ".join(parts)

    lines = ["| comparison | seed | metric | delta | 95% CI | one-sided p | verdict | "
             "seed 2 minus seed 1, same arm |", "|---|---|---|---|---|---|---|---|"]
    for b, a in rows:
        for metric in METRICS:
            t = tests.get(f"{b} vs {a}, {metric}")
            if t is None:
                continue
            ok = t["delta"] > 0 and t["p_value"] < p_value
            lines.append(f"| {b.removesuffix(', seed 2')} vs {CONTROL} | {seed_of(b)} | {metric} "
                         f"| {t['delta']:+.2f} | {t['delta_ci95']} | {t['p_value']:.4f} | "
                         + (f"above at p < {p_value:g}" if ok else "not shown above")
                         + f" | {spread((b, a), metric)} |")
    return lines
