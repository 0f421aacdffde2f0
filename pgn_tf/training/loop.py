"""The training loop: steps, logs, checkpoints, validation, the best checkpoint, early stopping,
the learning-rate schedule and the wall-clock budget, around a Trainer (pgn_tf.training.trainer).

Stops at train.max_steps, after train.max_minutes, after train.early_stop_patience evaluations
without a better validation measure, or with a UserError when train.max_nonfinite_steps steps in
a row had a non-finite loss or gradient (those steps are skipped; no checkpoint with non-finite
weights is ever written, and a non-finite validation measure is never the best).
"""

from __future__ import annotations

import logging
import math
import os
import time

import tensorflow as tf

from pgn_tf.training.optimizers import initial_learning_rate
from pgn_tf.training.trainer import Trainer
from pgn_tf.utils.errors import UserError
from pgn_tf.utils.progress import StepBar

log = logging.getLogger("pgn_tf")  # a command shows it as [pgn_tf] lines (pgn_tf.utils.logs)

SCALARS = ("loss", "nll", "coverage_loss", "p_gen_mean", "grad_norm", "reward_sample",
           "reward_greedy", "sample_capped", "advantage_abs", "advantage_zero", "sample_entropy",
           "sample_p_gen")


def learning_rate(trainer: Trainer, step: int, elapsed: float) -> float:
    """train.lr_schedule: "constant", or "cosine" from the initial rate down to
    lr_min_ratio x it over the budget (minutes if train.max_minutes, else steps), after a
    linear warm-up of train.warmup_steps."""
    t = trainer.cfg.train
    lr0 = initial_learning_rate(t)
    done = step - trainer.phase_start
    if t.warmup_steps and done < t.warmup_steps:
        return lr0 * (done + 1) / t.warmup_steps
    if t.lr_schedule != "cosine":
        return lr0
    frac = (elapsed / (60 * t.max_minutes) if t.max_minutes > 0
            else done / max(1, t.max_steps - trainer.phase_start))
    frac = min(1.0, max(0.0, frac))
    return lr0 * (t.lr_min_ratio + (1 - t.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def weights_finite(model) -> bool:
    return bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(v))
                               for v in model.trainable_variables]))


class _Progress:
    """The training bar (pgn_tf.utils.progress.StepBar) over steps, or over the seconds of a
    time budget: with a budget the bar reaches its end when the budget does, and its ETA is
    the budget left. Made when the timed loop starts (the budget's clock), so the initial
    validation before it does not inflate the ETA; it says `compiling` until the steps after
    the first (which traces the step) are timed."""

    def __init__(self, trainer: Trainer, verbose: int, clock=time.perf_counter):
        t = trainer.cfg.train
        self.budget = 60 * t.max_minutes if t.max_minutes > 0 else 0
        target = int(self.budget) if self.budget else t.max_steps - trainer.phase_start
        self.bar = StepBar(target, verbose, interval=5.0, budget=bool(self.budget), clock=clock)
        self.bar.update(0, [("step", trainer.phase_start)])

    def update(self, step: int, done: int, elapsed: float, values, final: bool = False) -> None:
        self.bar.update(done, [("step", step)] + list(values or []),
                        at=elapsed if self.budget else None, final=final)


def fit(trainer: Trainer, verbose: int = 1) -> dict:
    """Runs the phase to its end; returns its summary (pgn_tf.training.run.TrainResult's)."""
    t = trainer.cfg.train
    start = trainer.phase_start
    if start >= t.max_steps:
        log.info("model dir already at step %d >= train.max_steps=%d", start, t.max_steps)
        return {"steps": 0, "final_step": start}
    it = iter(trainer.train_ds)
    initial, last = {}, {}
    if (start == 0 or trainer.fresh_optimizer) and trainer.eval_ds is not None:
        ev = _validate(trainer, start, samples=False)  # where the curve starts
        if ev:
            initial = {f"initial_eval_{k}": v for k, v in ev.items()}
            if trainer.fresh_optimizer:  # a new phase: its model is the first best of its kind
                trainer.save_best(ev, force=True)
    progress = _Progress(trainer, verbose)
    t0 = t_window = time.perf_counter()
    window = {"steps": 0, "examples": 0}
    steady = {"steps": 0, "seconds": 0.0, "src_tokens": 0.0}
    streak = skipped = stale = 0
    stopped_early = False
    step = start
    for step in range(start + 1, t.max_steps + 1):
        elapsed = _clock(trainer, t0)
        trainer.optimizer.learning_rate.assign(_lr(trainer, step, elapsed))
        report = trainer.train_step(next(it))
        trainer.step.assign(step)
        elapsed = _clock(trainer, t0)
        final = step == t.max_steps or (t.max_minutes > 0 and elapsed > 60 * t.max_minutes)
        if float(report["nonfinite"]) > 0:
            streak, skipped = streak + 1, skipped + 1
            if streak >= t.max_nonfinite_steps:
                raise UserError(
                    f"training diverged: the loss or gradient was not finite for {streak} steps "
                    f"in a row (the last at step {step}; {skipped} skipped in all); the last "
                    f"finite checkpoint is kept. Lower train.learning_rate or check the data")
        else:
            streak = 0
        window["steps"] += 1
        window["examples"] += trainer.global_batch
        if step % t.log_every == 0 or final:
            last = {k: float(v) for k, v in report.items()}
            seconds = time.perf_counter() - t_window
            _log_train(trainer, step, last, window, seconds, skipped)
            if step - start > t.log_every:  # the first window includes tracing
                steady["steps"] += window["steps"]
                steady["seconds"] += seconds
                steady["src_tokens"] += last["src_tokens"] * window["steps"]
            t_window, window = time.perf_counter(), {"steps": 0, "examples": 0}
        progress.update(step, step - start, elapsed,
                        [(k, float(report[k])) for k in ("loss", "grad_norm")]
                        if step % 10 == 0 or final else None, final=final)
        if (step % t.checkpoint_every == 0 or final) and streak == 0:
            if weights_finite(trainer.model):
                trainer.save_checkpoint(step)
        if trainer.eval_ds is not None and (step % t.eval_every == 0 or final):
            ev = _validate(trainer, step, samples=bool(t.eval_samples))
            if ev:
                last.update({f"eval_{k}": v for k, v in ev.items()})
                improved = trainer.save_best(ev)
                if improved and t.export_on_best and trainer.is_chief:
                    _export_best(trainer, step)
                stale = 0 if improved else stale + 1
                if t.lr_halving == "eval" and not improved:  # Rush et al. section 7
                    _halve(trainer)
                if t.early_stop_patience and stale >= t.early_stop_patience:
                    log.info("early stop at step %d: no better %s in %d evaluations", step,
                             trainer.measure, stale)
                    stopped_early = final = True
                    if step % t.checkpoint_every:
                        trainer.save_checkpoint(step)
        if t.lr_halving == "epoch" and trainer.steps_per_epoch and (
                (step - start) % trainer.steps_per_epoch == 0):
            _epoch_plateau(trainer, step)
        if final:
            break
    for writer in (trainer.train_writer, trainer.eval_writer):
        if writer is not None:
            writer.flush()
    total = time.perf_counter() - t0
    result = {"steps": step - start, "final_step": step, "wall_seconds": round(total, 2),
              "steps_per_sec": round((step - start) / total, 3), "skipped_steps": skipped,
              "stopped_early": stopped_early}
    if steady["steps"]:
        result["steady_steps_per_sec"] = round(steady["steps"] / steady["seconds"], 3)
        result["steady_src_tokens_per_sec"] = round(steady["src_tokens"] / steady["seconds"], 1)
    if trainer.best_value is not None:
        result["best_" + trainer.measure_key] = round(trainer.best_value, 4)
    result.update({k: round(v, 4) for k, v in {**initial, **last}.items()
                   if k not in ("src_tokens", "nonfinite")})
    return result


def _export_best(trainer: Trainer, step: int) -> None:
    """Exports the new best checkpoint as the next version under train.export_on_best."""
    from pgn_tf.saved_model import export

    base, name = os.path.split(os.path.normpath(trainer.cfg.train.export_on_best))
    versions = [int(v) for v in (os.listdir(trainer.cfg.train.export_on_best)
                                 if os.path.isdir(trainer.cfg.train.export_on_best) else [])
                if v.isascii() and v.isdigit()]
    path = export.export(trainer.mdir.path, base or ".", name, max(versions, default=0) + 1,
                         which=trainer.best_manager.latest_checkpoint)
    log.info("step %d: the new best is exported as %s", step, path)


def _clock(trainer: Trainer, t0: float) -> float:
    """Seconds since t0; with several workers and a time budget, the chief's seconds, so that
    every worker takes the same learning rate and stops at the same step."""
    elapsed = time.perf_counter() - t0
    if trainer.cfg.train.max_minutes > 0:
        elapsed = trainer.from_chief([elapsed])[0]
    return elapsed


def _lr(trainer: Trainer, step: int, elapsed: float) -> float:
    if trainer.cfg.train.lr_halving != "none":
        return float(trainer.optimizer.learning_rate.numpy())  # halved on plateaus, kept
    return learning_rate(trainer, step, elapsed)


def _halve(trainer: Trainer) -> None:
    lr = float(trainer.optimizer.learning_rate.numpy()) / 2
    trainer.optimizer.learning_rate.assign(lr)
    log.info("no improvement: learning rate halved to %g", lr)


def _epoch_plateau(trainer: Trainer, step: int) -> None:
    """Rush et al. section 7: halve the rate when validation log-likelihood did not improve
    over the epoch."""
    ev = trainer.eval_loss()
    if not ev:
        return
    best = trainer.epoch_best_loss
    if best is not None and not ev["loss"] < best:
        _halve(trainer)
    if best is None or ev["loss"] < best:
        trainer.epoch_best_loss = ev["loss"]
    log.info("epoch ends at step %d: eval loss %.4f", step, ev["loss"])


def _log_train(trainer, step, last, window, seconds, skipped) -> None:
    if trainer.train_writer is None:
        return
    with trainer.train_writer.as_default(step=step):
        for k in SCALARS:
            if k in last:
                tf.summary.scalar(k, last[k])
        if "reward_sample" in last:
            tf.summary.scalar("reward_sample_minus_greedy",
                              last["reward_sample"] - last["reward_greedy"])
        tf.summary.scalar("examples_per_sec", window["examples"] / seconds)
        tf.summary.scalar("steps_per_sec", window["steps"] / seconds)
        tf.summary.scalar("src_tokens_per_step", last["src_tokens"])
        tf.summary.scalar("skipped_steps", skipped)
        tf.summary.scalar("learning_rate", float(trainer.optimizer.learning_rate.numpy()))


def _validate(trainer: Trainer, step: int, samples: bool) -> dict | None:
    """Validation at `step`: its figures go to TensorBoard and to one logged line."""
    ev = trainer.validate()
    if ev and trainer.eval_writer is not None:
        with trainer.eval_writer.as_default(step=step):
            for k, v in ev.items():
                tf.summary.scalar(k, v)
        if samples:
            trainer.log_samples(step, trainer.cfg.train.eval_samples)
    if ev:
        figures = ", ".join(f"eval {k} {v:.4f}" for k, v in ev.items())
        # on a line of its own after the progress bar's
        log.info("step %d: %s", step, figures, extra={"newline": True})
    return ev
