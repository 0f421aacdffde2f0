"""What one training run holds: strategy, data, model, optimizer, objective, checkpoints, the
compiled steps, and validation (eval loss or ROUGE) with the best checkpoint.

`pgn_tf.train` (the CLI) validates the config and builds a Trainer; `pgn_tf.training.loop.fit`
runs it.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import model_dir as model_dir_lib
from pgn_tf import objectives
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset
from pgn_tf.models import build_model
from pgn_tf.training import hardware, validation
from pgn_tf.training.distribute import worker_role
from pgn_tf.training.guard import apply_guarded, scale_loss
from pgn_tf.training.optimizers import initial_learning_rate, make_optimizer
from pgn_tf.utils.errors import UserError


class Trainer:
    """Args:
      cfg: the resolved, validated Config; mdir: the ModelDir; vocab; train_files / eval_files:
      TFRecord files; strategy: a tf.distribute strategy (the default one on a single device);
      fresh_optimizer: True when this run starts a new phase (coverage conversion, new
      objective): model weights come from the previous phase (train.convert_from), the
      optimizer starts fresh; is_chief: whether this worker writes checkpoints and logs.

    Under MultiWorkerMirroredStrategy every worker builds the same Trainer and runs the same
    steps (collectives need all of them); only the chief writes the model dir (worker_role).
    """

    def __init__(self, cfg: config_lib.Config, mdir: model_dir_lib.ModelDir,
                 vocab: vocab_lib.Vocab, train_files: list[str], eval_files: list[str] | None,
                 strategy: tf.distribute.Strategy, fresh_optimizer: bool = False,
                 previous_cfg: config_lib.Config | None = None, is_chief: bool = True):
        self.cfg = cfg
        self.mdir = mdir
        self.vocab = vocab
        self.strategy = strategy
        self.eval_files = eval_files
        self.train_files = train_files
        self.is_chief = is_chief
        self.num_workers = worker_role(strategy)[1]
        tcfg = cfg.train
        n = strategy.num_replicas_in_sync
        if tcfg.batch_size % n:
            raise UserError(f"train.batch_size={tcfg.batch_size} is not divisible by {n} replicas")
        self.global_batch = tcfg.batch_size
        self.objective = objectives.build(cfg)
        if tcfg.jit_compile and n > 1:
            # XLA cannot read a mirrored variable from another replica's device.
            raise UserError(f"train.jit_compile compiles a one-replica step; this strategy has "
                            f"{n} replicas (train on one device, or leave jit_compile off)")
        if cfg.decode.jit_step and n > 1:  # the validation ROUGE decodes with the model
            raise UserError(f"decode.jit_step compiles a one-replica decoding step; this "
                            f"strategy has {n} replicas (leave it off for training, set it "
                            "when decoding: --set decode.jit_step=true)")
        self.precision = hardware.mixed_precision_policy(tcfg.mixed_precision)  # the Keras policy
        self.loss_scaling = hardware.needs_loss_scaling(self.precision)
        with strategy.scope():
            keras.utils.set_random_seed(tcfg.seed)
            # Layers take the policy when built; restore it after, so nothing else inherits it.
            previous = keras.mixed_precision.global_policy()
            keras.mixed_precision.set_global_policy(self.precision)
            try:
                self.model = build_model(cfg.model, vocab.size)
            finally:
                keras.mixed_precision.set_global_policy(previous)
            self.inner_optimizer = make_optimizer(tcfg)
            # float16: Keras's dynamic loss scaling (its overflow skip is the NaN guard's,
            # clip_and_guard); the checkpoint keeps the inner optimizer under "optimizer" and
            # the scale apart, so runs of either precision resume each other's checkpoints.
            self.optimizer = (keras.optimizers.LossScaleOptimizer(self.inner_optimizer)
                              if self.loss_scaling else self.inner_optimizer)
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self._saved = dict(step=self.step, model=self.model, optimizer=self.inner_optimizer)
            if self.loss_scaling:
                self._saved["loss_scale"] = self.optimizer
            self.ckpt = tf.train.Checkpoint(**self._saved)
        self.manager = tf.train.CheckpointManager(
            self.ckpt, mdir.ckpt_dir, max_to_keep=tcfg.keep_checkpoints, checkpoint_name="ckpt")
        self.best_manager = tf.train.CheckpointManager(
            self.ckpt, mdir.best_dir, max_to_keep=1, checkpoint_name="best")
        self.fresh_optimizer = fresh_optimizer
        self.restored_from = self._restore(previous_cfg)
        self.phase_start = int(self.step.numpy())
        self._build_data()
        self.train_writer = self.eval_writer = None
        if is_chief:
            self.train_writer = tf.summary.create_file_writer(os.path.join(mdir.path, "train"))
            self.eval_writer = tf.summary.create_file_writer(os.path.join(mdir.path, "eval"))
        self._train_step = self._eval_step = self._rouge_fn = self._samples = None
        self._from_chief = None
        self.measure, self.measure_key, self.higher_is_better = config_lib.best_measure(cfg)
        info = mdir.read_best() if not fresh_optimizer else None
        self.best_value = (info["value"] if info and info.get("metric") == self.measure
                           else None)

    # -- set-up -----------------------------------------------------------------------------

    def _restore(self, previous_cfg) -> str | None:
        """Restores the latest checkpoint (a resume), or, at a new phase, the model weights of
        the previous phase's best (or latest) checkpoint and the latest step."""
        latest = self.mdir.latest_checkpoint()
        if not latest:
            return None
        tcfg = self.cfg.train
        if not self.fresh_optimizer:
            ckpt = self.ckpt
            if self.loss_scaling and not any(name.startswith("loss_scale/") for name, _ in
                                             tf.train.list_variables(latest)):
                # written without loss scaling: the scale starts at its initial value
                ckpt = tf.train.Checkpoint(**{k: v for k, v in self._saved.items()
                                              if k != "loss_scale"})
            ckpt.restore(latest).assert_existing_objects_matched()
            # The config, not the checkpoint, sets the learning rate (Keras 3 checkpoints it),
            # except where training halves it on plateaus: then the halved value carries on.
            if tcfg.lr_halving == "none":
                self.optimizer.learning_rate.assign(initial_learning_rate(tcfg))
            return latest
        # A new phase: a new coverage weight keeps its zero init, the optimizer starts fresh
        # (its slots would not line up; a new objective has its own learning rate).
        source = latest
        if tcfg.convert_from == "best" and previous_cfg is not None:
            source = self.mdir.best_checkpoint(previous_cfg) or latest
        tf.train.Checkpoint(step=self.step).read(latest).expect_partial()
        model_dir_lib.restore_model(self.model, source)
        return source

    def _build_data(self) -> None:
        tcfg, n = self.cfg.train, self.strategy.num_replicas_in_sync
        ds = dataset.make_dataset(
            self.train_files, self.vocab, self.cfg.data, tcfg.batch_size,
            self.cfg.model.pointer_gen, True, seed=tcfg.seed,
            fixed_shapes=tcfg.jit_compile).map(dataset.model_features)
        if self.num_workers > 1:
            ds = dataset.shard_by_data(ds)
        # Resuming continues the data order: the pipeline is deterministic for a seed, so the
        # batches the checkpoint's steps consumed are skipped.
        consumed = int(self.step.numpy())
        if consumed and not self.fresh_optimizer:
            ds = ds.skip(consumed)
        self.train_ds = self.strategy.experimental_distribute_dataset(ds) if n > 1 else ds
        self.steps_per_epoch = self.epoch_best_loss = None
        if tcfg.lr_halving == "epoch":  # Rush et al.: the rate halves per epoch, not per eval
            records = sum(1 for _ in tf.data.TFRecordDataset(self.train_files))
            self.steps_per_epoch = max(1, records // tcfg.batch_size)
        self.eval_ds = None
        if self.eval_files:
            eds = dataset.make_dataset(
                self.eval_files, self.vocab, self.cfg.data, self.global_batch,
                self.cfg.model.pointer_gen, training=False, drop_empty=True,
                skip=tcfg.eval_skip,
            ).map(dataset.model_features).take(tcfg.eval_batches)
            if self.num_workers > 1:
                eds = dataset.shard_by_data(eds)
            self.eval_ds = self.strategy.experimental_distribute_dataset(eds) if n > 1 else eds

    # -- compiled steps ---------------------------------------------------------------------

    def _step_fn(self, batch):
        model, opt, tcfg = self.model, self.optimizer, self.cfg.train
        with tf.GradientTape() as tape:
            terms = self.objective(model, batch, training=True)
            loss = tf.nn.compute_average_loss(terms["total"], global_batch_size=self.global_batch)
            scaled_loss = scale_loss(opt, loss)
        variables = model.trainable_variables
        grads = tape.gradient(scaled_loss, variables)
        n = self.strategy.num_replicas_in_sync
        if n > 1:
            # Clip the *global* gradient (See et al.: norm 2.0): sum replicas first. Keras sums
            # across replicas again inside apply_gradients, so hand it 1/n of the reduced value.
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                    grads)
        norm, finite = apply_guarded(opt, grads, variables, loss, tcfg.max_grad_norm, n)
        scale = 1.0 / self.global_batch
        report = {
            "loss": loss,
            "nll": tf.reduce_sum(terms["nll"]) * scale,
            "p_gen_mean": terms["p_gen_mean"] / n,
            "grad_norm": norm / n,
            "nonfinite": (1.0 - tf.cast(finite, tf.float32)) / n,
            "src_tokens": tf.cast(tf.reduce_sum(batch["enc_len"]), tf.float32),
            "tgt_tokens": tf.cast(tf.reduce_sum(batch["dec_len"]), tf.float32),
        }
        for key in ("coverage", "reward_sample", "reward_greedy", "sample_capped",
                    "advantage_abs", "advantage_zero", "sample_entropy", "sample_p_gen"):
            if key in terms:
                report["coverage_loss" if key == "coverage" else key] = (
                    tf.reduce_sum(terms[key]) * scale)
        return report

    def _eval_fn(self, batch):
        ml = getattr(self.objective, "ml", self.objective)
        terms = ml(self.model, batch, training=False)
        out = {"total": tf.reduce_sum(terms["total"]), "nll": tf.reduce_sum(terms["nll"]),
               "count": tf.cast(tf.size(terms["total"]), tf.float32)}
        if "coverage" in terms:
            out["coverage_loss"] = tf.reduce_sum(terms["coverage"])
        if isinstance(self.objective, objectives.SelfCritical):  # Paulus et al.'s reward
            out["reward"] = tf.reduce_sum(self.objective.greedy_reward(self.model, batch))
        return out

    def _compile(self, fn, element_spec, jit_compile: bool = False):
        """fn as a tf.function over batches of element_spec, run per replica and summed; with
        jit_compile (one replica only, see __init__) XLA compiles it once per batch shape."""
        strategy = self.strategy
        if strategy.num_replicas_in_sync == 1:
            return tf.function(fn, input_signature=[element_spec], jit_compile=jit_compile,
                               autograph=False)

        def step(b):
            per_replica = strategy.run(fn, args=(b,))
            return {k: strategy.reduce("SUM", v, axis=None) for k, v in per_replica.items()}

        return tf.function(step, input_signature=[element_spec], autograph=False)

    def train_step(self, batch) -> dict:
        if self._train_step is None:
            self._train_step = self._compile(self._step_fn, self.train_ds.element_spec,
                                             self.cfg.train.jit_compile)
        return self._train_step(batch)

    # -- validation and the best checkpoint ---------------------------------------------------

    def eval_loss(self) -> dict | None:
        """Mean per-example eval loss (and reward) over at most train.eval_batches batches."""
        if self.eval_ds is None:
            return None
        if self._eval_step is None:
            self._eval_step = self._compile(self._eval_fn, self.eval_ds.element_spec)
        sums: dict = {}
        for batch in self.eval_ds:
            for k, v in self._eval_step(batch).items():
                sums[k] = sums.get(k, 0.0) + float(v)
        if not sums or sums["count"] == 0:
            if self.cfg.train.eval_skip:
                raise UserError(f"train.eval_skip={self.cfg.train.eval_skip} skips every "
                                "validation example: nothing is left to evaluate")
            return None
        count = sums.pop("count")
        return {("loss" if k == "total" else k): v / count for k, v in sums.items()}

    def eval_rouge(self) -> dict:
        """Validation ROUGE (training.validation.eval_rouge)."""
        return validation.eval_rouge(self)

    def log_samples(self, step: int, num: int = 3) -> None:
        """A few decoded validation articles into TensorBoard (training.validation)."""
        validation.log_samples(self, step, num)

    def validate(self) -> dict | None:
        """The eval loss, plus ROUGE when the best checkpoint is chosen by it."""
        metrics = self.eval_loss()
        if metrics is not None and self.measure.startswith("rouge"):
            if self.num_workers == 1:
                metrics.update(self.eval_rouge())
            else:  # the chief decodes; the best and early stopping follow its figures
                scores = self.eval_rouge() if self.is_chief else {}
                keys = ("rouge1", "rouge2", "rougeLsum")
                metrics.update(zip(keys, self.from_chief([scores.get(k, 0.0) for k in keys])))
        return metrics

    def is_better(self, value: float) -> bool:
        if value is None or not math.isfinite(value):
            return False  # a NaN eval is never the best (NaN >= x is False for any x)
        if self.best_value is None:
            return True
        return value > self.best_value if self.higher_is_better else value < self.best_value

    def save_best(self, metrics: dict, force: bool = False) -> bool:
        """Saves the current model as the best checkpoint if metrics beat the best so far (or
        force, at the start of a phase, when they are finite). Chief only."""
        value = metrics.get(self.measure_key)
        if not (self.is_better(value) or (force and value is not None
                                          and math.isfinite(value))):
            return False
        self.best_value = value
        step = int(self.step.numpy())
        self._save(self.best_manager, step)
        if self.is_chief:
            self.mdir.write_best({"metric": self.measure, "value": value, "step": step,
                                  "higher_is_better": self.higher_is_better,
                                  "checkpoint": self.best_manager.latest_checkpoint})
        return True

    # -- what only the chief writes -----------------------------------------------------------

    def save_checkpoint(self, step: int) -> None:
        """Saves ckpt-<step> into <model_dir>/ckpt (every worker must call it: see _save)."""
        self._save(self.manager, step)

    def _save(self, manager: tf.train.CheckpointManager, step: int) -> None:
        """The chief saves through `manager`; another worker saves the same checkpoint into a
        temporary directory of its own and deletes it (the TF multi-worker guide's pattern:
        saving may run collectives, so every worker saves, but one writer per model dir)."""
        if self.is_chief:
            manager.save(checkpoint_number=step)
            return
        scratch = tempfile.mkdtemp(prefix="pgn_tf-worker-ckpt-")
        try:
            tf.train.CheckpointManager(self.ckpt, scratch, max_to_keep=1).save(
                checkpoint_number=step)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def from_chief(self, values: list[float]) -> list[float]:
        """The chief's `values` on every worker (identity on one worker): decisions taken from
        a clock or a decoded ROUGE must agree across workers, or their collectives part ways.
        One all-reduce in which only the chief's replicas contribute."""
        if self.num_workers == 1:
            return values
        if self._from_chief is None:
            strategy = self.strategy
            # Each of the chief's local replicas adds 1/local of the value; the rest add zero.
            weight = (1.0 / len(strategy.extended.worker_devices)) if self.is_chief else 0.0

            def replica_fn(x):
                return tf.distribute.get_replica_context().all_reduce("SUM", x * weight)

            @tf.function(input_signature=[tf.TensorSpec([None], tf.float64)], autograph=False)
            def broadcast(x):  # float64 [k] -> [k]
                return strategy.experimental_local_results(strategy.run(replica_fn, args=(x,)))[0]

            self._from_chief = broadcast
        return [float(v) for v in self._from_chief(tf.constant(values, tf.float64)).numpy()]
