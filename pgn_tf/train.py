"""`python -m pgn_tf.train`: train a model in a model dir (pgn_tf.model_dir).

    python -m pgn_tf.train --config see2017_pgn --train_data train.jsonl.gz \
        --eval_data validation.jsonl.gz --model_dir runs/pgn [--set train.max_steps=1000 ...]

Without --train_data it trains on the bundled synthetic corpus (pgn_tf.data.synthetic) with the
`tiny` preset. The run is validated before anything is written (config, model-dir
compatibility, vocab, data paths); then pgn_tf.training.trainer builds data, model, optimizer and
objective (pgn_tf.objectives) under the strategy, and pgn_tf.training.loop runs the steps.
Checkpoints go
to <model_dir>/ckpt (resumed automatically, the data order continuing), the best one to
<model_dir>/best, TensorBoard logs to <model_dir>/{train,eval}. Running again with
`--set model.coverage=true` in a model dir trained without coverage converts the model (See et
al.'s final phase) from the previous phase's best checkpoint: the new coverage weight starts at
zero and training continues with a fresh optimizer. Likewise `--set train.objective=mixed`
(Paulus et al.'s ML+RL phase, for any model) continues with a fresh optimizer at
train.rl_learning_rate; its best checkpoint is then the highest validation ROUGE.

`--strategy multi_worker` (MultiWorkerMirroredStrategy): every worker runs the same command with
its own TF_CONFIG; the chief (task "chief", or worker 0) alone writes the model dir, which every
worker must see (a shared file system). When a worker dies the others stop with one error line;
restarted, all of them resume from the last checkpoint, the data order continuing.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.train"))
import argparse
import contextlib
import dataclasses
import json
import os

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import model_dir as model_dir_lib
from pgn_tf import vocab as vocab_lib
from pgn_tf.data import dataset, synthetic, tfrecord
from pgn_tf.training import loop
from pgn_tf.training.distribute import barrier, worker_role
from pgn_tf.training.trainer import Trainer
from pgn_tf.utils.dirlock import DirLock
from pgn_tf.utils.durable import write_json
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def set_cpu_devices(n: int) -> None:
    """Splits the CPU into n logical devices (must run before TF initialises its runtime)."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    )


def make_strategy(name: str) -> tf.distribute.Strategy:
    """`mirrored`: MirroredStrategy over all local GPUs (else CPU devices), or the default
    strategy when there is only one device (no all-reduce or replica context to pay for);
    `multi_worker`: MultiWorkerMirroredStrategy from TF_CONFIG; `default`: no distribution.
    Created before any other TF op, as collective ops require."""
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) == 1:
            return tf.distribute.get_strategy()
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        _check_tf_config(os.environ.get("TF_CONFIG"))
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise UserError(f"unknown --strategy '{name}' (mirrored, multi_worker, default)")


def _check_tf_config(raw: str | None) -> None:
    """TF_CONFIG names this process' task among the cluster's chief and workers (unset: one
    worker, this machine)."""
    if not raw:
        return
    try:
        tf_config = json.loads(raw)
        cluster, task = tf_config["cluster"], tf_config["task"]
        task_type, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError('TF_CONFIG must be JSON {"cluster": {"worker": ["host:port", ...]}, '
                        f'"task": {{"type": "worker", "index": N}}}} ({type(e).__name__}: {e})'
                        ) from None
    if task_type not in ("chief", "worker"):
        raise UserError(f"TF_CONFIG task type '{task_type}' is not supported by pgn_tf.train "
                        f"(chief or worker)")
    if not 0 <= index < len(cluster.get(task_type, [])):
        raise UserError(f"TF_CONFIG task {task_type}:{index} is not in its cluster "
                        f"({', '.join(f'{k}: {len(v)}' for k, v in cluster.items())})")


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
            print(f"[pgn_tf] no --train_data: writing the synthetic corpus to {syn_dir}")
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
    fmt = fmt or dataset.detect_format(path)
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


def prepare(args) -> Plan:
    """Validates everything that can be checked before anything in the model dir is written:
    the config, its compatibility with the model dir, the vocab, the data paths."""
    default_config = "tiny" if not args.train_data else "see2017_pgn"
    cfg = config_lib.resolve(args.config or default_config, args.set)
    mdir = model_dir_lib.ModelDir(args.model_dir)
    latest = mdir.latest_checkpoint()
    fresh, previous = False, None
    if mdir.has_config() and latest:
        previous = config_lib.load_from_model_dir(mdir.path)
        fresh = model_dir_lib.phase_change(previous, cfg, mdir.path)
    _check_data_path(args.train_data, args.data_format)
    _check_data_path(args.eval_data, args.data_format)
    vocab_path = mdir.vocab_file(cfg)
    vocab = None
    if tf.io.gfile.exists(vocab_path):
        vocab = vocab_lib.Vocab.load(vocab_path, cfg.data.vocab_size)
        _check_vocab(vocab, mdir, vocab_path, latest)
    elif cfg.data.vocab_path:
        raise UserError(f"vocab file {vocab_path} (data.vocab_path) does not exist")
    elif latest:
        raise UserError(f"model dir {mdir.path} has checkpoints but no vocab.txt")
    return Plan(cfg, mdir, args.train_data, args.eval_data, args.data_format, vocab, fresh,
                previous)


def run(args) -> dict:
    if args.cpu_devices > 1:
        set_cpu_devices(args.cpu_devices)
    strategy = make_strategy(args.strategy)
    is_chief, num_workers = worker_role(strategy)
    plan = prepare(args)
    # One writer per model dir (of several workers, the chief); the lock is taken only once
    # the run is known to be valid.
    lock = DirLock(plan.mdir.path, what="model dir") if is_chief else contextlib.nullcontext()
    with lock:
        try:
            return _train(plan, strategy, args.quiet)
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


def _train(plan: Plan, strategy: tf.distribute.Strategy, quiet: bool) -> dict:
    """Every worker of a multi-worker run gets here; the chief alone writes the model dir:
    the data cache and the vocab first (the others wait at a barrier, then read them),
    config.json, checkpoints, TensorBoard logs and train_result.json."""
    cfg, mdir = plan.cfg, plan.mdir
    is_chief, num_workers = worker_role(strategy)
    vocab = plan.vocab
    if is_chief:
        train_files, eval_files = plan.resolve_data()
        if vocab is None:
            print(f"[pgn_tf] building a {cfg.data.vocab_size}-word vocab from the training data")
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
        how = ("continues with a fresh optimizer (coverage conversion or a new objective) from"
               if plan.fresh else "resumed from")
        print(f"[pgn_tf] {how} {trainer.restored_from} (step {int(trainer.step.numpy())})")
    scaling = " with loss scaling" if trainer.loss_scaling else ""
    print(f"[pgn_tf] {strategy.num_replicas_in_sync} replica(s); "
          f"{trainer.model.count_params():,} parameters; vocab {vocab.size}; "
          f"model.rnn_impl {trainer.model.rnn_impl}; precision {trainer.precision}{scaling}")
    result = loop.fit(trainer, verbose=0 if quiet else 1)
    if is_chief:
        write_json(os.path.join(mdir.path, "train_result.json"), result)
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
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.train", run, build_parser().parse_args(argv))
