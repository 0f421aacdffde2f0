"""`python -m pgn_tf.train`: the custom training loop.

    python -m pgn_tf.train --config see2017_pgn --train_data train.jsonl.gz \
        --eval_data validation.jsonl.gz --model_dir runs/pgn [--set train.max_steps=1000 ...]

Without --train_data it trains on the bundled synthetic corpus (pgn_tf.data.synthetic) with the
`tiny` preset. A `tf.function` step runs under tf.distribute.MirroredStrategy (all local devices);
checkpoints go to <model_dir>/ckpt (resumed automatically), the best eval loss to
<model_dir>/best, TensorBoard logs to <model_dir>/{train,eval}. Running again with
`--set model.coverage=true` in a model dir trained without coverage converts the model (See et
al.'s final phase): the new coverage weight starts at zero and training continues from the
checkpoint's step with a fresh optimizer. Likewise `--set train.objective=mixed` (Paulus et
al.'s ML+RL phase, model.model_type=deep_reinforced) continues an ML model dir with a fresh
optimizer at train.rl_learning_rate; its best checkpoint is then the highest validation ROUGE-L.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import keras
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset, synthetic
from pgn_tf.errors import UserError, run_cli
from pgn_tf.models import build_model

NUMERIC_KEYS = ("enc_ids", "enc_ext_ids", "enc_len", "num_oovs", "dec_input", "target", "dec_len")


def numeric_features(batch: dict) -> dict:
    return {k: batch[k] for k in NUMERIC_KEYS}


def set_cpu_devices(n: int) -> None:
    """Splits the CPU into n logical devices (must run before TF initialises its runtime)."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    )


def make_strategy(name: str) -> tf.distribute.Strategy:
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise UserError(f"unknown --strategy '{name}' (mirrored, multi_worker, default)")


OBJECTIVES = ("ml", "mixed", "rl")


def make_optimizer(train_cfg: config_lib.TrainConfig) -> keras.optimizers.Optimizer:
    lr = train_cfg.learning_rate if train_cfg.objective == "ml" else train_cfg.rl_learning_rate
    if train_cfg.optimizer == "adagrad":
        return keras.optimizers.Adagrad(
            learning_rate=lr,
            initial_accumulator_value=train_cfg.adagrad_init_acc,
            epsilon=1e-10,
        )
    if train_cfg.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate=lr)
    if train_cfg.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=lr)
    raise UserError(f"unknown train.optimizer '{train_cfg.optimizer}' (adagrad, adam, sgd)")


def checkpoint_embedding_rows(ckpt_path: str) -> int | None:
    for name, shape in tf.train.list_variables(ckpt_path):
        if "embedding" in name and "embeddings" in name and "optimizer" not in name:
            return shape[0]
    return None


def _check_compatible(old: config_lib.Config, new: config_lib.Config, model_dir: str) -> bool:
    """Raises UserError if the model dir's architecture differs; returns True when training
    continues from the checkpoint with a fresh optimizer: the coverage conversion (old without
    coverage, new with) or a change of objective (Paulus et al.'s ML -> mixed phase)."""
    for key in ("model_type", "hidden_dim", "emb_dim", "pointer_gen", "intra_temporal_attention",
                "intra_decoder_attention", "shared_embedding"):
        a, b = getattr(old.model, key), getattr(new.model, key)
        if a != b:
            raise UserError(
                f"model dir {model_dir} holds a model with model.{key}={a}, but this run asks "
                f"for model.{key}={b}; use a new --model_dir"
            )
    if old.model.coverage and not new.model.coverage:
        raise UserError(
            f"model dir {model_dir} holds a coverage model; it cannot continue without coverage"
        )
    return (new.model.coverage and not old.model.coverage) or (
        new.train.objective != old.train.objective)


class Trainer:
    """Everything one training run holds: data, model, optimizer, checkpoints, summaries."""

    def __init__(self, cfg: config_lib.Config, model_dir: str, vocab: vocab_lib.Vocab,
                 train_files: list[str], eval_files: list[str] | None,
                 strategy: tf.distribute.Strategy, fresh_optimizer: bool = False):
        self.cfg = cfg
        self.model_dir = model_dir
        self.vocab = vocab
        self.strategy = strategy
        self.eval_files = eval_files
        tcfg = cfg.train
        n = strategy.num_replicas_in_sync
        if tcfg.objective not in OBJECTIVES:
            raise UserError(f"unknown train.objective '{tcfg.objective}' ({', '.join(OBJECTIVES)})")
        if tcfg.batch_size % n:
            raise UserError(f"train.batch_size={tcfg.batch_size} is not divisible by {n} replicas")
        self.global_batch = tcfg.batch_size
        train_ds = dataset.make_dataset(
            train_files, vocab, cfg.data, tcfg.batch_size, cfg.model.pointer_gen, True,
            seed=tcfg.seed,
        ).map(numeric_features)
        self.train_ds = strategy.experimental_distribute_dataset(train_ds)
        if tcfg.mixed_precision not in ("", "mixed_bfloat16"):
            raise UserError(f"train.mixed_precision must be '' or 'mixed_bfloat16', got "
                            f"'{tcfg.mixed_precision}'")
        with strategy.scope():
            keras.utils.set_random_seed(tcfg.seed)
            # Layers take the policy when built; restore it after, so nothing else inherits it.
            previous = keras.mixed_precision.global_policy()
            keras.mixed_precision.set_global_policy(tcfg.mixed_precision or "float32")
            try:
                self.model = build_model(cfg.model, vocab.size)
            finally:
                keras.mixed_precision.set_global_policy(previous)
            if tcfg.objective != "ml" and not hasattr(self.model, "rl_terms"):
                raise UserError(f"train.objective={tcfg.objective} needs a model with a policy-"
                                f"gradient objective (model.model_type=deep_reinforced)")
            self.optimizer = make_optimizer(tcfg)
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.ckpt = tf.train.Checkpoint(step=self.step, model=self.model, optimizer=self.optimizer)
        self.manager = tf.train.CheckpointManager(
            self.ckpt, os.path.join(model_dir, "ckpt"), max_to_keep=tcfg.keep_checkpoints,
            checkpoint_name="ckpt",
        )
        self.best_manager = tf.train.CheckpointManager(
            self.ckpt, os.path.join(model_dir, "best"), max_to_keep=1, checkpoint_name="best"
        )
        self.restored_from = None
        self.fresh_optimizer = fresh_optimizer
        latest = self.manager.latest_checkpoint
        if latest:
            if fresh_optimizer:
                # Only model weights and the step: a new coverage weight keeps its zero init
                # and the optimizer starts fresh (its slots would not line up; a new objective
                # has its own learning rate).
                tf.train.Checkpoint(step=self.step, model=self.model).restore(latest).expect_partial()
            else:
                self.ckpt.restore(latest).assert_existing_objects_matched()
            self.restored_from = latest
            # The config, not the checkpoint, sets the learning rate (Keras 3 checkpoints it),
            # except where training halves it on plateaus: then the halved value carries on.
            if not tcfg.halve_lr_on_plateau or fresh_optimizer:
                lr = tcfg.learning_rate if tcfg.objective == "ml" else tcfg.rl_learning_rate
                self.optimizer.learning_rate.assign(lr)
        self.train_writer = tf.summary.create_file_writer(os.path.join(model_dir, "train"))
        self.eval_writer = tf.summary.create_file_writer(os.path.join(model_dir, "eval"))
        self._train_step = None
        self._eval_step = None
        self._samples = None

    # -- compiled steps ---------------------------------------------------------------------

    def _step_fn(self, batch):
        model, opt = self.model, self.optimizer
        tcfg = self.cfg.train
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            terms = model.loss_terms(batch, out)
            if tcfg.objective != "ml":  # Paulus et al. eq. 16 (gamma = 1: eq. 15 alone)
                gamma = tcfg.rl_gamma if tcfg.objective == "mixed" else 1.0
                rl = model.rl_terms(batch)
                terms.update(rl, total=gamma * rl["rl"] + (1.0 - gamma) * terms["nll"])
            loss = tf.nn.compute_average_loss(terms["total"], global_batch_size=self.global_batch)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        n = self.strategy.num_replicas_in_sync
        if n > 1:
            # Clip the *global* gradient (See et al.: norm 2.0): sum replicas first. Keras sums
            # across replicas again inside apply_gradients, so hand it 1/n of the reduced value.
            grads = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, grads
            )
        if tcfg.max_grad_norm > 0:
            grads, norm = tf.clip_by_global_norm(grads, tcfg.max_grad_norm)
        else:
            norm = tf.linalg.global_norm(grads)
        if n > 1:
            grads = [
                tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
                if isinstance(g, tf.IndexedSlices) else g / n
                for g in grads
            ]
        opt.apply_gradients(zip(grads, variables))
        scale = 1.0 / self.global_batch
        report = {
            "loss": loss,
            "nll": tf.reduce_sum(terms["nll"]) * scale,
            "p_gen_mean": terms["p_gen_mean"] / n,
            "grad_norm": norm / n,
            "src_tokens": tf.cast(tf.reduce_sum(batch["enc_len"]), tf.float32),
            "tgt_tokens": tf.cast(tf.reduce_sum(batch["dec_len"]), tf.float32),
        }
        if "coverage" in terms:
            report["coverage_loss"] = tf.reduce_sum(terms["coverage"]) * scale
        for key in ("reward_sample", "reward_greedy"):
            if key in terms:
                report[key] = tf.reduce_sum(terms[key]) * scale
        return report

    def _eval_fn(self, batch):
        terms = self.model.loss_terms(batch, self.model(batch, training=False))
        out = {
            "total": tf.reduce_sum(terms["total"]),
            "nll": tf.reduce_sum(terms["nll"]),
            "count": tf.cast(tf.size(terms["total"]), tf.float32),
        }
        if "coverage" in terms:
            out["coverage_loss"] = tf.reduce_sum(terms["coverage"])
        if hasattr(self.model, "greedy_reward"):  # validation ROUGE-L, the RL phase's measure
            out["reward"] = tf.reduce_sum(self.model.greedy_reward(batch))
        return out

    def train_step(self, batch):
        if self._train_step is None:
            def step(b):
                per_replica = self.strategy.run(self._step_fn, args=(b,))
                return {k: self.strategy.reduce("SUM", v, axis=None) for k, v in per_replica.items()}

            self._train_step = tf.function(step, input_signature=[self.train_ds.element_spec])
        return self._train_step(batch)

    def evaluate(self) -> dict | None:
        """Mean per-example eval loss over at most train.eval_batches batches."""
        if not self.eval_files:
            return None
        ds = dataset.make_dataset(
            self.eval_files, self.vocab, self.cfg.data, self.global_batch,
            self.cfg.model.pointer_gen, training=False, drop_empty=True,
        ).map(numeric_features).take(self.cfg.train.eval_batches)
        dist = self.strategy.experimental_distribute_dataset(ds)
        if self._eval_step is None:
            def step(b):
                per_replica = self.strategy.run(self._eval_fn, args=(b,))
                return {k: self.strategy.reduce("SUM", v, axis=None) for k, v in per_replica.items()}

            self._eval_step = tf.function(step, input_signature=[dist.element_spec])
        sums: dict = {}
        for batch in dist:
            for k, v in self._eval_step(batch).items():
                sums[k] = sums.get(k, 0.0) + float(v)
        if not sums or sums["count"] == 0:
            return None
        count = sums.pop("count")
        return {("loss" if k == "total" else k): v / count for k, v in sums.items()}

    def log_samples(self, step: int, num: int = 3) -> None:
        """Decodes a few validation articles into TensorBoard: text (article, reference,
        summary) and the attention heatmap with p_gen of each."""
        from pgn_tf import visualize
        from pgn_tf.data import tfrecord
        from pgn_tf.inference import Summarizer

        if self._samples is None:
            examples = []
            for ex in tfrecord.read_tfrecords(self.eval_files[0]):
                examples.append(ex)
                if len(examples) == num:
                    break
            summarizer = Summarizer(self.model, self.vocab, self.cfg)
            fn = tf.function(lambda a: summarizer.summarize(a, verbose=True),
                             input_signature=[tf.TensorSpec([None], tf.string)])
            self._samples = (examples, fn)
        examples, fn = self._samples
        if not examples:
            return
        out = fn(tf.constant([e.article for e in examples]))
        with self.eval_writer.as_default(step=step):
            for i, ex in enumerate(examples):
                n = int(out["length"][i])
                summary = out["summaries"].numpy()[i].decode("utf-8", "replace")
                src_len = int(tf.reduce_sum(tf.cast(out["source_tokens"][i] != b"", tf.int32)))
                tf.summary.text(f"sample_{i}", f"**article:** {ex.article[:500]}\n\n"
                                f"**reference:** {ex.summary}\n\n**decoded:** {summary}")
                image = visualize.attention_image(out["attention"].numpy()[i][:n, :src_len],
                                                  out["p_gen"].numpy()[i][:n], scale=4)
                tf.summary.image(f"attention_{i}", image[None])

    # -- the loop ---------------------------------------------------------------------------

    def _maybe_save_best(self, eval_metrics: dict) -> bool:
        """Saves a new best checkpoint; returns whether this eval improved on the best."""
        metric, key, higher = config_lib.best_measure(self.cfg)
        value = eval_metrics[key]
        path = os.path.join(self.model_dir, "best", "best.json")
        if os.path.exists(path):
            with open(path) as f:
                best = json.load(f)
            # A best chosen by another measure (an earlier phase's) does not compete.
            if best.get("metric", "loss") == metric:
                old = best.get("value", best.get("eval_loss"))
                if (value <= old) if higher else (value >= old):
                    return False
        self.best_manager.save(checkpoint_number=int(self.step.numpy()))
        with open(path + ".tmp", "w") as f:
            json.dump({"step": int(self.step.numpy()), "metric": metric, "value": value,
                       "eval_loss": eval_metrics["loss"],
                       "checkpoint": self.best_manager.latest_checkpoint}, f)
        os.replace(path + ".tmp", path)
        return True

    def _eval_and_log(self, step: int) -> dict | None:
        """Runs evaluate(); its figures go to TensorBoard at `step` and to one printed line."""
        ev = self.evaluate()
        if ev:
            with self.eval_writer.as_default(step=step):
                for k, v in ev.items():
                    tf.summary.scalar(k, v)
            figures = ", ".join(f"eval {k} {v:.4f}" for k, v in ev.items())
            print(f"\n[pgn_tf] step {step}: {figures}", flush=True)
        return ev

    def fit(self, verbose: int = 1) -> dict:
        tcfg = self.cfg.train
        start = int(self.step.numpy())
        if start >= tcfg.max_steps:
            print(f"[pgn_tf] model dir already at step {start} >= train.max_steps={tcfg.max_steps}")
            return {"steps": 0, "final_step": start}
        progbar = keras.utils.Progbar(tcfg.max_steps, verbose=verbose, stateful_metrics=None,
                                      interval=5.0)
        it = iter(self.train_ds)
        window_steps, window_ex = 0, 0
        t0 = time.perf_counter()
        steady = {"steps": 0, "seconds": 0.0, "src_tokens": 0.0}
        last, initial = {}, {}
        if (start == 0 or self.fresh_optimizer) and self.eval_files:  # where the curve starts
            ev = self._eval_and_log(start)
            if ev:
                initial = {f"initial_eval_{k}": v for k, v in ev.items()}
                if self.fresh_optimizer:  # a new phase: its model is the first best of its kind
                    self._maybe_save_best(ev)
        t_window = time.perf_counter()
        step = start
        for step in range(start + 1, tcfg.max_steps + 1):
            report = self.train_step(next(it))
            self.step.assign(step)
            # train.max_minutes: a wall-clock budget; the step that crosses it is the last.
            final = step == tcfg.max_steps or (
                tcfg.max_minutes > 0 and time.perf_counter() - t0 > 60 * tcfg.max_minutes)
            window_steps += 1
            window_ex += self.global_batch
            if step % tcfg.log_every == 0 or final:
                last = {k: float(v) for k, v in report.items()}
                elapsed = time.perf_counter() - t_window
                with self.train_writer.as_default(step=step):
                    for k in ("loss", "nll", "coverage_loss", "p_gen_mean", "grad_norm",
                              "reward_sample", "reward_greedy"):
                        if k in last:
                            tf.summary.scalar(k, last[k])
                    if "reward_sample" in last:
                        tf.summary.scalar("reward_sample_minus_greedy",
                                          last["reward_sample"] - last["reward_greedy"])
                    tf.summary.scalar("examples_per_sec", window_ex / elapsed)
                    tf.summary.scalar("steps_per_sec", window_steps / elapsed)
                    tf.summary.scalar("src_tokens_per_step", last["src_tokens"])
                    lr = self.optimizer.learning_rate
                    tf.summary.scalar("learning_rate", float(lr.numpy() if hasattr(lr, "numpy") else lr))
                if step - start > tcfg.log_every:  # the first window includes tracing
                    steady["steps"] += window_steps
                    steady["seconds"] += elapsed
                    steady["src_tokens"] += last["src_tokens"] * window_steps
                t_window = time.perf_counter()
                window_steps, window_ex = 0, 0
            progbar.update(step, [(k, float(report[k])) for k in ("loss", "grad_norm")]
                           if step % 10 == 0 or final else None)
            if step % tcfg.checkpoint_every == 0 or final:
                self.manager.save(checkpoint_number=step)
            if self.eval_files and (step % tcfg.eval_every == 0 or final):
                ev = self._eval_and_log(step)
                if ev:
                    improved = self._maybe_save_best(ev)
                    if tcfg.halve_lr_on_plateau and not improved:  # Rush et al. section 7
                        lr = float(self.optimizer.learning_rate.numpy()) / 2
                        self.optimizer.learning_rate.assign(lr)
                        print(f"[pgn_tf] no improvement: learning rate halved to {lr:g}")
                    if tcfg.eval_samples:
                        self.log_samples(step, tcfg.eval_samples)
                    last.update({f"eval_{k}": v for k, v in ev.items()})
            if final:
                break
        self.train_writer.flush()
        self.eval_writer.flush()
        total = time.perf_counter() - t0
        steps = step - start
        result = {"steps": steps, "final_step": step, "wall_seconds": round(total, 2),
                  "steps_per_sec": round(steps / total, 3)}
        if steady["steps"]:
            result["steady_steps_per_sec"] = round(steady["steps"] / steady["seconds"], 3)
            result["steady_src_tokens_per_sec"] = round(steady["src_tokens"] / steady["seconds"], 1)
        result.update({k: round(v, 4) for k, v in {**initial, **last}.items()
                       if k != "src_tokens"})
        return result


def prepare(args) -> tuple[config_lib.Config, vocab_lib.Vocab, list[str], list[str] | None, bool]:
    """Validates everything before anything in the model dir is written."""
    model_dir = args.model_dir
    default_config = "tiny" if not args.train_data else "see2017_pgn"
    cfg = config_lib.resolve(args.config or default_config, args.set)
    fresh = False
    saved_cfg_path = os.path.join(model_dir, "config.json")
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "ckpt"))
    if os.path.exists(saved_cfg_path) and latest:
        fresh = _check_compatible(config_lib.load_from_model_dir(model_dir), cfg, model_dir)

    cache = os.path.join(model_dir, "data")
    if args.train_data:
        train_files = dataset.resolve_files(args.train_data, cache, args.data_format)
        eval_files = (
            dataset.resolve_files(args.eval_data, cache, args.data_format) if args.eval_data else None
        )
    else:
        syn_dir = os.path.join(model_dir, "synthetic")
        if not tf.io.gfile.glob(os.path.join(syn_dir, "train-*.tfrecord")):
            print(f"[pgn_tf] no --train_data: writing the synthetic corpus to {syn_dir}")
            synthetic.write_corpus(syn_dir, seed=cfg.train.seed)
        train_files = sorted(tf.io.gfile.glob(os.path.join(syn_dir, "train-*.tfrecord")))
        eval_files = (
            dataset.resolve_files(args.eval_data, cache, args.data_format)
            if args.eval_data else sorted(tf.io.gfile.glob(os.path.join(syn_dir, "validation-*")))
        )

    vocab_path = vocab_lib.vocab_path_for(model_dir, cfg.data.vocab_path)
    if tf.io.gfile.exists(vocab_path):
        vocab = vocab_lib.Vocab.load(vocab_path, cfg.data.vocab_size)
    elif cfg.data.vocab_path:
        raise UserError(f"vocab file {vocab_path} (data.vocab_path) does not exist")
    elif latest:
        raise UserError(f"model dir {model_dir} has checkpoints but no vocab.txt")
    else:
        print(f"[pgn_tf] building a {cfg.data.vocab_size}-word vocab from the training data")
        vocab = dataset.build_vocab(train_files, cfg.data)
    if latest:
        rows = checkpoint_embedding_rows(latest)
        if rows is not None and rows != vocab.size:
            raise UserError(
                f"vocab {vocab_path} has {vocab.size} words (data.vocab_size="
                f"{cfg.data.vocab_size}), checkpoint {latest} expects {rows}"
            )
    return cfg, vocab, train_files, eval_files, fresh


def run(args) -> dict:
    if args.cpu_devices > 1:
        set_cpu_devices(args.cpu_devices)
    cfg, vocab, train_files, eval_files, fresh = prepare(args)
    os.makedirs(args.model_dir, exist_ok=True)
    vocab_path = os.path.join(args.model_dir, "vocab.txt")
    if not os.path.exists(vocab_path):
        vocab.save(vocab_path)
    strategy = make_strategy(args.strategy)
    trainer = Trainer(cfg, args.model_dir, vocab, train_files, eval_files, strategy, fresh)
    cfg.save(os.path.join(args.model_dir, "config.json"))
    if trainer.restored_from:
        how = ("continues with a fresh optimizer (coverage conversion or a new objective) from"
               if fresh else "resumed from")
        print(f"[pgn_tf] {how} {trainer.restored_from} (step {int(trainer.step.numpy())})")
    print(f"[pgn_tf] {strategy.num_replicas_in_sync} replica(s); "
          f"{trainer.model.count_params():,} parameters; vocab {vocab.size}")
    result = trainer.fit(verbose=0 if args.quiet else 1)
    with open(os.path.join(args.model_dir, "train_result.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("[pgn_tf] " + json.dumps(result))
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.train", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="preset name or YAML/JSON file (default: tiny without "
                   "--train_data, else see2017_pgn)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable)")
    p.add_argument("--train_data", help="TFRecord glob, JSONL(.gz), .story dir, .bin glob or "
                   "tfds:DATA_DIR[:split]; default: the synthetic corpus")
    p.add_argument("--eval_data")
    p.add_argument("--data_format", choices=dataset.FORMATS)
    p.add_argument("--model_dir", default="runs/quickstart")
    p.add_argument("--strategy", default="mirrored", help="mirrored | multi_worker | default")
    p.add_argument("--cpu_devices", type=int, default=1,
                   help="split the CPU into N logical devices (MirroredStrategy over them)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.train", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
