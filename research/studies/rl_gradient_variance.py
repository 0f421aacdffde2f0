"""How noisy is the self-critical gradient? Paulus et al.'s estimator (eq. 15) measured on a
trained model, beside the ML gradient on the same batches.

    python -m research.studies.rl_gradient_variance --model_dir MODEL_DIR --data DATA \
        [--batches 8] [--samples 16] [--batch_size 32] [--checkpoint best|latest|PATH]

For each of --batches batches of DATA (in file order, the model dir's data settings), the
gradient of the batch-mean self-critical term, (r(y^) - r(y^s)) * sum_t log p(y^s_t), is drawn
--samples times (a fresh sample y^s each time, the same greedy baseline y^), and the gradient of
the batch-mean ML objective (the model's NLL, plus its coverage term) once. Per batch, over the
flattened trainable weights:

  rl_mean_norm    ||g||, g the mean of the draws: the estimator's signal on that batch
  rl_noise        sqrt(E||g_s - g||^2): the spread of one draw about that mean (the trace of its
                  covariance, square-rooted; unbiased over the draws)
  rl_snr          ||g||^2 / E||g_s - g||^2: above 1, a single draw points mostly where the mean
                  does; below, mostly noise (the mean itself still carries the variance of a
                  --samples average, so this under-states a low SNR only slightly)
  cos_rl_ml       cosine between the mean RL direction and the ML one (both as descent
                  directions of their losses: > 0 they agree)
  ml_norm         ||g_ml||; and across batches, the ML gradient's own minibatch SNR
                  (||mean over batches||^2 / the spread across batches), so the RL estimator's
                  noise on ONE batch can be set beside the noise ML training lives with anyway
  advantage_zero  the share of examples whose sample scores as the baseline: no gradient

Prints one line a batch, a summary, and a JSON line. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

from pgn_tf import objectives
from pgn_tf.data import dataset
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils.errors import run_cli
from research.common import emit


def flat(grads, variables) -> np.ndarray:
    """One float64 vector of a gradient list (None and IndexedSlices handled)."""
    parts = []
    for g, v in zip(grads, variables):
        if g is None:
            parts.append(np.zeros(int(np.prod(v.shape))))
        else:
            parts.append(np.asarray(tf.convert_to_tensor(g), np.float64).ravel())
    return np.concatenate(parts)


def draw_stats(draws: np.ndarray) -> dict:
    """The mean of S gradient draws [S, P] and the spread of one draw about it."""
    s = draws.shape[0]
    mean = draws.mean(axis=0)
    noise2 = float(((draws - mean) ** 2).sum(axis=1).sum() / max(s - 1, 1))
    signal2 = float(mean @ mean)
    return {"mean": mean, "mean_norm": signal2 ** 0.5, "noise": noise2 ** 0.5,
            "snr": signal2 / noise2 if noise2 > 0 else float("inf")}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    n = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / n) if n > 0 else 0.0


def measure(model_dir: str, data: str, batches: int, samples: int, batch_size: int,
            checkpoint: str = "best") -> dict:
    cfg, vocab, model, path = ModelDir(model_dir).load_model(checkpoint)
    rl_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, objective="rl"))
    objective = objectives.build(rl_cfg)  # gamma = 1: the self-critical term alone
    variables = model.trainable_variables

    @tf.function(reduce_retracing=True, autograph=False)
    def rl_grad(batch):
        with tf.GradientTape() as tape:
            terms = objective.rl_terms(model, batch)
            loss = tf.reduce_mean(terms["rl"])
        return (tape.gradient(loss, variables), terms["advantage_zero"], terms["reward_sample"],
                terms["reward_greedy"])

    @tf.function(reduce_retracing=True, autograph=False)
    def ml_grad(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(objective.ml(model, batch, training=False)["total"])
        return tape.gradient(loss, variables)

    files = dataset.resolve_files(data, tempfile.mkdtemp(prefix="rl_grad_var-"), verbose=0)
    ds = dataset.make_dataset(files, vocab, cfg.data, batch_size, cfg.model.pointer_gen,
                              training=False, drop_empty=True)
    rows, ml_vectors = [], []
    for i, batch in enumerate(ds.take(batches)):
        feats = dataset.model_features(batch)
        g_ml = flat(ml_grad(feats), variables)
        ml_vectors.append(g_ml)
        draws, zero, r_s, r_g = [], [], [], []
        for _ in range(samples):
            g, adv0, rs, rg = rl_grad(feats)
            draws.append(flat(g, variables))
            zero.append(float(tf.reduce_mean(adv0)))
            r_s.append(float(tf.reduce_mean(rs)))
            r_g.append(float(tf.reduce_mean(rg)))
        st = draw_stats(np.stack(draws))
        row = {"batch": i, "rl_mean_norm": st["mean_norm"], "rl_noise": st["noise"],
               "rl_snr": st["snr"], "cos_rl_ml": cosine(st["mean"], g_ml),
               "ml_norm": float(np.linalg.norm(g_ml)), "advantage_zero": float(np.mean(zero)),
               "reward_sample": float(np.mean(r_s)), "reward_greedy": float(np.mean(r_g))}
        rows.append(row)
        print(f"batch {i}: RL |mean| {row['rl_mean_norm']:.4f}, one draw's noise "
              f"{row['rl_noise']:.4f}, SNR {row['rl_snr']:.3f}, cos(RL, ML) "
              f"{row['cos_rl_ml']:+.3f}; ML |g| {row['ml_norm']:.4f}; advantage 0 in "
              f"{row['advantage_zero']:.0%}; reward sample {row['reward_sample']:.3f} vs greedy "
              f"{row['reward_greedy']:.3f}", flush=True)
    ml = draw_stats(np.stack(ml_vectors))
    out = {"model_dir": model_dir, "checkpoint": os.path.basename(path), "batches": len(rows),
           "samples": samples, "batch_size": batch_size,
           "params": int(sum(np.prod(v.shape) for v in variables))}
    for key in ("rl_mean_norm", "rl_noise", "rl_snr", "cos_rl_ml", "ml_norm", "advantage_zero",
                "reward_sample", "reward_greedy"):
        out[key] = round(float(np.median([r[key] for r in rows])), 4)
    out["ml_minibatch_snr"] = round(ml["snr"], 4)
    out["ml_mean_over_batches_norm"] = round(ml["mean_norm"], 4)
    print(f"medians over {len(rows)} batches of {batch_size} ({samples} draws each): RL signal "
          f"{out['rl_mean_norm']}, one draw's noise {out['rl_noise']}, SNR {out['rl_snr']}, "
          f"cos(RL, ML) {out['cos_rl_ml']}; ML |g| {out['ml_norm']}, ML minibatch SNR across the "
          f"batches {out['ml_minibatch_snr']}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data", required=True, help="a data path of any supported format")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--checkpoint", default="best", help="best, latest or a checkpoint path")
    a = p.parse_args(argv)
    return run_cli("rl_gradient_variance", lambda: emit(
        "rl_gradient_variance", measure(a.model_dir, a.data, a.batches, a.samples,
                                        a.batch_size, a.checkpoint)))


if __name__ == "__main__":
    sys.exit(main())
