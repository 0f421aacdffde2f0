"""Training as a library call: `train(model_dir, config, ...)` validates the run (config,
model-dir compatibility, vocab, data paths) before anything is written, then
pgn_tf.training.trainer builds data, model, optimizer and objective (pgn_tf.objectives) under the
strategy and pgn_tf.training.loop runs the steps. `python -m pgn_tf.train` parses its flags into
this call; pipelines, studies and tests call it directly and get a TrainResult.

Checkpoints go to <model_dir>/ckpt (resumed automatically, the data order continuing), the best
one to <model_dir>/best, TensorBoard logs to <model_dir>/{train,eval}. Training again with
`model.coverage=true` in a model dir trained without coverage converts the model (See et al.'s
final phase) from the previous phase's best checkpoint; likewise `train.objective=mixed`
(Paulus et al.'s ML+RL phase). Under `multi_worker` every worker runs the same call with its own
TF_CONFIG; the chief alone writes the model dir.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
from collections.abc import Sequence

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import model_dir as model_dir_lib
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset, synthetic, tfrecord
from pgn_tf.data.articles import detect_format
from pgn_tf.training import hardware, loop
from pgn_tf.training.distribute import barrier, make_strategy, set_cpu_devices, worker_role
from pgn_tf.training.trainer import Trainer
from pgn_tf.utils.dirlock import DirLock
from pgn_tf.utils.durable import write_json
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf")  # a command shows it as [pgn_tf] lines (pgn_tf.utils.logs)


@dataclasses.dataclass
class TrainResult:
    """What a training phase did; `as_dict()` is <model_dir>/train_result.json.

    The figures every run has are fields. `metrics` holds the rest, whose keys depend on the
    model, the objective and the evaluation: the last logged step's (loss, grad_norm,
    coverage_loss, reward_sample, ...), the last evaluation's (eval_loss, eval_rougeLsum, ...),
    the first one's (initial_eval_*), best_<measure>, and the steady-state throughput
    (steady_steps_per_sec, steady_src_tokens_per_sec) once the first window is past."""

    steps: int  # run by this call (0: the model dir was already at train.max_steps)
    final_step: int
    precision: str  # what ran, not what was asked (`auto` resolves by machine)
    rnn_impl: str
    wall_seconds: float = 0.0
    steps_per_sec: float = 0.0
    skipped_steps: int = 0  # non-finite steps the guard dropped
    stopped_early: bool = False
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_summary(cls, summary: dict, precision: str, rnn_impl: str) -> TrainResult:
        """From pgn_tf.training.loop.fit's summary."""
        fixed = {f.name for f in dataclasses.fields(cls)} - {"metrics"}
        return cls(precision=precision, rnn_impl=rnn_impl,
                   **{k: v for k, v in summary.items() if k in fixed},
                   metrics={k: v for k, v in summary.items() if k not in fixed})

    def as_dict(self) -> dict:
        """One flat summary: the fields, then the metrics (train_result.json's keys)."""
        fields = dataclasses.asdict(self)
        return {**{k: v for k, v in fields.items() if k != "metrics"}, **self.metrics}


@dataclasses.dataclass
class Plan:
    """A validated training run; nothing of it has been written yet."""

    cfg: config_lib.Config
    mdir: model_dir_lib.ModelDir
    train_data: str | None
    eval_data: str | None
    data_format: str | None
    vocab: vocab_lib.Vocab | None  # None: built from the training data
    fresh: bool  # a new phase (coverage conversion or new objective)
    previous_cfg: config_lib.Config | None

    def resolve_data(self, write: bool = True) -> tuple[list[str], list[str] | None]:
        """TFRecord files of the training and eval data (non-TFRecord inputs are converted
        into <model_dir>/data once; without --train_data, the synthetic corpus is written).
        write=False: only find them (a multi-worker run's other workers; the chief writes)."""
        cache = self.mdir.cache_dir
        if self.train_data:
            train_files = dataset.resolve_files(self.train_data, cache, self.data_format, write)
            eval_files = (dataset.resolve_files(self.eval_data, cache, self.data_format, write)
                          if self.eval_data else None)
            return train_files, eval_files
        syn_dir = os.path.join(self.mdir.path, "synthetic")
        if write and not tf.io.gfile.glob(os.path.join(syn_dir, "train-*.tfrecord")):
            log.info("no --train_data: writing the synthetic corpus to %s", syn_dir)
            synthetic.write_corpus(syn_dir, seed=self.cfg.train.seed)
        train_files = sorted(tf.io.gfile.glob(os.path.join(syn_dir, "train-*.tfrecord")))
        eval_files = (dataset.resolve_files(self.eval_data, cache, self.data_format, write)
                      if self.eval_data
                      else sorted(tf.io.gfile.glob(os.path.join(syn_dir, "validation-*"))))
        if not train_files:
            raise UserError(f"the synthetic corpus in {syn_dir} is missing (every worker must "
                            f"see the same model dir: a shared file system)")
        return train_files, eval_files


def _check_data_path(path: str | None, fmt: str | None) -> None:
    """Fails early (nothing written) on a data path that names nothing."""
    if not path:
        return
    fmt = fmt or detect_format(path)
    if fmt == "tfrecord":
        if not tf.io.gfile.glob(path):
            raise UserError(f"data path {path} matches no file")
        return
    src = path[len("tfds:"):].split(":")[0] if fmt == "tfds" else path.split(",")[0]
    if not tf.io.gfile.exists(src):
        raise UserError(f"data path {src} does not exist")


def _check_vocab(vocab: vocab_lib.Vocab, mdir: model_dir_lib.ModelDir, path: str,
                 latest: str | None) -> None:
    """The vocabulary must be the one the checkpoint was trained with: same size, and, when the
    model dir keeps its own vocab.txt, the same words (never train new ids into old rows)."""
    if not latest:
        return
    rows = model_dir_lib.checkpoint_embedding_rows(latest)
    if rows is not None and rows != vocab.size:
        raise UserError(f"vocab {path} has {vocab.size} words, checkpoint {latest} expects "
                        f"{rows} (data.vocab_size or data.vocab_path changed)")
    own = mdir.vocab_path
    if path != own and os.path.exists(own):
        kept = vocab_lib.Vocab.load(own, vocab.size)
        differ = sum(a != b for a, b in zip(kept.words, vocab.words))
        if differ:
            raise UserError(f"vocab {path} differs from the model dir's vocab.txt (the "
                            f"checkpoint's) in {differ} of {vocab.size} words; use a new "
                            f"--model_dir or the same vocab")


def prepare(model_dir: str, config: str | config_lib.Config | None = None,
            overrides: Sequence[str] = (), train_data: str | None = None,
            eval_data: str | None = None, data_format: str | None = None) -> Plan:
    """Validates everything that can be checked before anything in the model dir is written:
    the config, its compatibility with the model dir, the vocab, the data paths (`train`'s
    arguments)."""
    if isinstance(config, config_lib.Config):
        cfg = copy.deepcopy(config)
        config_lib.apply_overrides(cfg, list(overrides))
    else:
        default_config = "tiny" if not train_data else "see2017_pgn"
        cfg = config_lib.resolve(config or default_config, list(overrides))
    hardware.mixed_precision_policy(cfg.train.mixed_precision)  # a policy that would crash: refused
    mdir = model_dir_lib.ModelDir(model_dir)
    latest = mdir.latest_checkpoint()
    fresh, previous = False, None
    if mdir.has_config() and latest:
        previous = config_lib.load_from_model_dir(mdir.path)
        fresh = model_dir_lib.phase_change(previous, cfg, mdir.path)
    _check_data_path(train_data, data_format)
    _check_data_path(eval_data, data_format)
    vocab_path = mdir.vocab_file(cfg)
    vocab = None
    if tf.io.gfile.exists(vocab_path):
        vocab = vocab_lib.Vocab.load(vocab_path, cfg.data.vocab_size)
        _check_vocab(vocab, mdir, vocab_path, latest)
    elif cfg.data.vocab_path:
        raise UserError(f"vocab file {vocab_path} (data.vocab_path) does not exist")
    elif latest:
        raise UserError(f"model dir {mdir.path} has checkpoints but no vocab.txt")
    return Plan(cfg, mdir, train_data, eval_data, data_format, vocab, fresh, previous)


def train(model_dir: str, config: str | config_lib.Config | None = None,
          overrides: Sequence[str] = (), train_data: str | None = None,
          eval_data: str | None = None, data_format: str | None = None,
          strategy: str = "mirrored", cpu_devices: int = 1, progress: bool = True) -> TrainResult:
    """Trains a model in `model_dir` (created, resumed, or continued into a new phase) and
    returns what the phase did (steps, losses, throughput, the best evaluation; also written to
    <model_dir>/train_result.json). What it does on the way (a resumed checkpoint, the
    replicas, each evaluation, the summary) is logged on the "pgn_tf" logger.

    Args:
      model_dir: where checkpoints, config.json, vocab.txt and TensorBoard logs go.
      config: a preset name, a YAML/JSON file, or a Config (default: `tiny` without
        train_data, else `see2017_pgn`); overrides: "section.key=value" strings on top.
      train_data, eval_data: any pgn_tf data path (TFRecord glob, JSONL(.gz), .story dir,
        .bin glob, tfds:DIR[:split], parallel text); no train_data: the synthetic corpus.
      data_format: the format when a path does not say (pgn_tf.data.articles.EXAMPLE_FORMATS).
      strategy: mirrored | multi_worker | default (pgn_tf.training.distribute.make_strategy).
      cpu_devices: split the CPU into this many logical devices first (before TF starts).
      progress: a progress bar on standard output (Keras's, the one thing written there).
    Raises UserError (a bad config, path, vocab or model dir; a lost worker) before anything
    is written where it can be checked first.
    """
    if cpu_devices > 1:
        set_cpu_devices(cpu_devices)
    strat = make_strategy(strategy)
    is_chief, num_workers = worker_role(strat)
    plan = prepare(model_dir, config, overrides, train_data, eval_data, data_format)
    # One writer per model dir (of several workers, the chief); the lock is taken only once
    # the run is known to be valid.
    lock = DirLock(plan.mdir.path, what="model dir") if is_chief else contextlib.nullcontext()
    with lock:
        try:
            return _train(plan, strat, progress)
        except PEER_LOST as e:
            if num_workers == 1:
                raise
            # TF's coordination service stops every worker when one stops sending heartbeats.
            raise UserError(f"a worker of the cluster stopped ({_first_line(e.message)}); "
                            f"restart the workers that exited: training resumes from the last "
                            f"checkpoint in {plan.mdir.ckpt_dir}") from None
        except tf.errors.OpError as e:  # a corrupt record met while reading the data
            message = tfrecord.read_error(e)
            if message is None:
                raise
            raise UserError(message) from None


# What a collective raises on the other workers when one worker of the cluster is lost.
PEER_LOST = (tf.errors.UnavailableError, tf.errors.AbortedError,
             tf.errors.DeadlineExceededError)


def _first_line(message: str) -> str:
    """The gist of a TF error message: its first line of text, past the "Graph execution
    error:" header, the indented traceback of where the op was defined and gRPC details."""
    skip = ("Graph execution error", "Detected at node", "Additional GRPC error", ":UNKNOWN:")
    lines = [line for line in message.splitlines()
             if line.strip() and not line[0].isspace() and not line.startswith(skip)]
    if not lines:
        return message.strip()[:200]
    line = lines[0].split("}} ", 1)[-1]
    if line.endswith(":") and len(lines) > 1:  # "tasks are unhealthy ...:\n/job:worker/..."
        line += " " + lines[1].strip()
    return line


def _train(plan: Plan, strategy: tf.distribute.Strategy, progress: bool) -> TrainResult:
    """Every worker of a multi-worker run gets here; the chief alone writes the model dir:
    the data cache and the vocab first (the others wait at a barrier, then read them),
    config.json, checkpoints, TensorBoard logs and train_result.json."""
    cfg, mdir = plan.cfg, plan.mdir
    is_chief, num_workers = worker_role(strategy)
    vocab = plan.vocab
    if is_chief:
        train_files, eval_files = plan.resolve_data()
        if vocab is None:
            log.info("building a %d-word vocab from the training data", cfg.data.vocab_size)
            vocab = dataset.build_vocab(train_files, cfg.data)
        if not os.path.exists(mdir.vocab_path):
            vocab.save(mdir.vocab_path)
    if num_workers > 1:
        barrier(strategy)
    if not is_chief:
        train_files, eval_files = plan.resolve_data(write=False)
        if vocab is None:
            vocab = mdir.read_vocab(cfg)
    trainer = Trainer(cfg, mdir, vocab, train_files, eval_files, strategy, plan.fresh,
                      plan.previous_cfg, is_chief=is_chief)
    if is_chief:
        mdir.write_config(cfg)
    if trainer.restored_from:
        how = ("continues with a fresh optimizer (coverage conversion, a new objective or a "
               "new train.phase_name) from" if plan.fresh else "resumed from")
        log.info("%s %s (step %d)", how, trainer.restored_from, int(trainer.step.numpy()))
    scaling = " with loss scaling" if trainer.loss_scaling else ""
    log.info("%d replica(s); %s parameters; vocab %d; model.rnn_impl %s; precision %s%s",
             strategy.num_replicas_in_sync, f"{trainer.model.count_params():,}", vocab.size,
             trainer.model.rnn_impl, trainer.precision, scaling)
    # What ran, not what was asked: `auto` resolves by machine, and a summary read later (or a
    # result compared across machines) must say which numeric path produced it.
    result = TrainResult.from_summary(loop.fit(trainer, verbose=1 if progress else 0),
                                      trainer.precision, trainer.model.rnn_impl)
    if is_chief:
        write_json(os.path.join(mdir.path, "train_result.json"), result.as_dict())
    return result
