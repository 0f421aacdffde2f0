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
import numpy as np
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import model_dir as model_dir_lib
from pgn_tf import objectives
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset
from pgn_tf.errors import UserError
from pgn_tf.models import build_model
from pgn_tf.training import hardware, optimizers


def make_optimizer(train_cfg: config_lib.TrainConfig) -> keras.optimizers.Optimizer:
    """train.optimizer; Adagrad and Adam update each variable with one fused TF kernel
    (pgn_tf.training.optimizers), except in an XLA-compiled step (train.jit_compile), where XLA
    fuses
    Keras's element-wise update itself and the sparse path's tf.unique has no XLA kernel."""
    lr = initial_learning_rate(train_cfg)
    fused = not train_cfg.jit_compile
    if train_cfg.optimizer == "adagrad":
        cls = optimizers.Adagrad if fused else keras.optimizers.Adagrad
        return cls(learning_rate=lr, initial_accumulator_value=train_cfg.adagrad_init_acc,
                   epsilon=1e-10)
    if train_cfg.optimizer == "adam":
        return (optimizers.Adam if fused else keras.optimizers.Adam)(learning_rate=lr)
    if train_cfg.optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=lr)
    raise UserError(f"unknown train.optimizer '{train_cfg.optimizer}' (adagrad, adam, sgd)")


def initial_learning_rate(train_cfg: config_lib.TrainConfig) -> float:
    return train_cfg.learning_rate if train_cfg.objective == "ml" else train_cfg.rl_learning_rate


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, int]:
    """(is this worker the chief, number of workers) from the strategy's cluster resolver
    (TF_CONFIG under MultiWorkerMirroredStrategy). The chief is task "chief", or worker 0 when
    the cluster has no chief; a single-machine strategy is its own chief."""
    resolver = getattr(strategy, "cluster_resolver", None)
    jobs = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not jobs:
        return True, 1
    workers = len(jobs.get("chief", [])) + len(jobs.get("worker", []))
    task = (resolver.task_type, resolver.task_id)
    return task == ("chief", 0) or (task == ("worker", 0) and "chief" not in jobs), workers


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Returns when every worker has reached it (one all-reduce of a scalar)."""
    tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)),
                                        axis=None))()


def clip_and_guard(grads, norm, finite, max_norm: float, n: int = 1, loss_scaled: bool = False):
    """The gradients to apply: clipped to max_norm (train.max_grad_norm; See et al.: 2.0; 0: no
    clip) by their global norm `norm`, divided by the n replicas (Keras sums them again), and
    zero where the step is not finite (`finite`, a bool scalar). IndexedSlices stay sparse. A
    non-finite step is dropped: for SGD and Adagrad the weights do not move; Adam's momentum
    still carries them one step. The loop counts such steps and stops on a streak
    (train.max_nonfinite_steps).

    loss_scaled: the gradients are those of a loss scaled by a keras LossScaleOptimizer (float16,
    `apply_guarded`), which divides them by its scale when it applies them and skips a step
    whose gradients are not all finite, halving its scale. A non-finite step then hands on NaNs
    instead of zeros, so the optimizer sees the step the guard dropped as the overflow it is:
    it applies nothing (Adam's moments included) and lowers the scale. One test of finiteness
    for both, the guard's.

    One multiply per gradient by a scalar that folds the clip and 1/n together, under a
    tf.cond that hands on the zeros instead when the step is not finite: clip_by_global_norm,
    a tf.where and a division by n would each read and write every gradient (three passes
    over the 256 x 20k vocabulary kernel a step at the reference sizes)."""
    factor = tf.constant(1.0 / n, tf.float32)
    if max_norm > 0:
        factor = factor * tf.minimum(1.0, max_norm / tf.maximum(norm, 1e-30))
    values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]

    def scaled():
        if max_norm <= 0 and n == 1:
            return values  # nothing to scale
        return [v * tf.cast(factor, v.dtype) for v in values]

    def dropped():
        if loss_scaled:
            return [tf.fill(tf.shape(v), tf.constant(float("nan"), v.dtype)) for v in values]
        return [tf.zeros_like(v) for v in values]

    out = tf.cond(finite, scaled, dropped)
    return [tf.IndexedSlices(v, g.indices, g.dense_shape) if isinstance(g, tf.IndexedSlices)
            else v for g, v in zip(grads, out)]


def scale_loss(optimizer, loss):
    """loss times the optimizer's loss scale (a keras LossScaleOptimizer's), else loss: what
    the tape differentiates."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.scale_loss(loss)
    return loss


def apply_guarded(optimizer, grads, variables, loss, max_norm: float, n: int = 1):
    """Applies the gradients of `scale_loss(optimizer, loss)` (all-reduced over the n replicas
    already) through `clip_and_guard`; returns (global norm of the unscaled gradients, whether
    the step was finite). Under a LossScaleOptimizer the norm is divided by its scale before
    the clip (the scaled gradients go to the optimizer, which unscales them)."""
    norm = tf.linalg.global_norm(grads)
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    if loss_scaled:
        norm = norm / optimizer.dynamic_scale
    finite = tf.math.is_finite(norm) & tf.math.is_finite(loss)
    grads = clip_and_guard(grads, norm, finite, max_norm, n, loss_scaled)
    optimizer.apply_gradients(zip(grads, variables))
    return norm, finite


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
            return tf.function(fn, input_signature=[element_spec], jit_compile=jit_compile)

        def step(b):
            per_replica = strategy.run(fn, args=(b,))
            return {k: strategy.reduce("SUM", v, axis=None) for k, v in per_replica.items()}

        return tf.function(step, input_signature=[element_spec])

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
        """ROUGE-1/2/Lsum F1 (x100, rouge-score) of train.eval_rouge_examples validation articles
        after the first train.eval_skip, decoded as evaluate decodes them (the decode
        config's search)."""
        import itertools

        from pgn_tf import evaluate
        from pgn_tf.data import tfrecord
        from pgn_tf.inference import Summarizer

        if self._rouge_fn is None:
            records = itertools.chain.from_iterable(
                tfrecord.read_tfrecords(f) for f in self.eval_files)
            t = self.cfg.train
            examples = list(itertools.islice(records, t.eval_skip,
                                             t.eval_skip + t.eval_rouge_examples))
            if not examples:
                raise UserError(f"train.eval_skip={t.eval_skip} skips every "
                                "validation example: nothing is left to select by ROUGE")
            refs = [evaluate.reference_text(e.summary, self.cfg.data) for e in examples]
            summarizer = Summarizer(self.model, self.vocab, self.cfg)
            fn = evaluate.decode_fn(summarizer, None, want_pgen=False)
            self._rouge_fn = (summarizer, fn, examples, refs)
        summarizer, fn, examples, refs = self._rouge_fn
        decoded = evaluate.decode_examples(summarizer, examples, self.cfg.decode.batch_size,
                                           None, want_pgen=False, verbose=0, fn=fn)[0]
        from pgn_tf.inference import tokens_to_sentences

        return evaluate.rouge([tokens_to_sentences(d) for d in decoded], refs, bootstrap=0)

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

            @tf.function(input_signature=[tf.TensorSpec([None], tf.float64)])
            def broadcast(x):  # float64 [k] -> [k]
                return strategy.experimental_local_results(strategy.run(replica_fn, args=(x,)))[0]

            self._from_chief = broadcast
        return [float(v) for v in self._from_chief(tf.constant(values, tf.float64)).numpy()]

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
                src_len = int(np.sum(out["source_tokens"].numpy()[i] != b""))
                tf.summary.text(f"sample_{i}", f"**article:** {ex.article[:500]}\n\n"
                                f"**reference:** {ex.summary}\n\n**decoded:** {summary}")
                image = visualize.attention_image(out["attention"].numpy()[i][:n, :src_len],
                                                  out["p_gen"].numpy()[i][:n], scale=4)
                tf.summary.image(f"attention_{i}", image[None])
