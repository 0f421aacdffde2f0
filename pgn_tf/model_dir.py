"""What a model directory holds, and the one reader of it for train, evaluate, export and
inference.

    <model_dir>/config.json   the resolved Config of the last training run
    <model_dir>/vocab.txt     the vocabulary (See et al.'s "word count" lines)
    <model_dir>/ckpt/         the latest checkpoints: step, model, optimizer
    <model_dir>/best/         the best checkpoint of the current training phase, and best.json
                              {"metric", "value", "step", "checkpoint", "higher_is_better"}
    <model_dir>/train/, eval/ TensorBoard logs
    <model_dir>/data/         non-TFRecord inputs converted once to TFRecords (a cache)
    <model_dir>/abs_plus.json ABS+ feature weights tuned by pgn_tf.tune ({"weights": "1,...",
                              "metric", "abs", "abs_plus", ...}); summarize, evaluate and
                              export decode with them unless --set decode.abs_plus_weights
    <model_dir>/.lock         held while a training run writes the directory

A training phase is one best-checkpoint measure (config.best_measure): the eval loss, the eval
loss with coverage terms, or validation ROUGE. A best saved under another measure (before a
coverage conversion, say) is passed over for the latest checkpoint.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import vocab as vocab_lib
from pgn_tf.models import build_model
from pgn_tf.utils.durable import write_json
from pgn_tf.utils.errors import UserError

# Architecture keys that must match between a model dir and a run that continues it.
ARCHITECTURE_KEYS = ("model_type", "hidden_dim", "enc_hidden_dim", "emb_dim", "pointer_gen",
                     "intra_temporal_attention", "intra_decoder_attention", "shared_embedding",
                     "abs_encoder", "abs_window", "abs_conv_layers", "abs_smoothing")


class ModelDir:
    """A model directory (module docstring). Reading never writes anything."""

    def __init__(self, path: str):
        self.path = path
        self.config_path = os.path.join(path, "config.json")
        self.vocab_path = os.path.join(path, "vocab.txt")
        self.ckpt_dir = os.path.join(path, "ckpt")
        self.best_dir = os.path.join(path, "best")
        self.best_json = os.path.join(self.best_dir, "best.json")
        self.cache_dir = os.path.join(path, "data")
        self.abs_plus_json = os.path.join(path, "abs_plus.json")

    # -- config and vocab -------------------------------------------------------------------

    def has_config(self) -> bool:
        return os.path.exists(self.config_path)

    def read_config(self) -> config_lib.Config:
        if not os.path.isdir(self.path):
            raise UserError(f"model dir {self.path} does not exist")
        if not self.has_config():
            raise UserError(f"{self.path} has no config.json: is it a pgn_tf model dir?")
        return config_lib.load_from_model_dir(self.path)

    def write_config(self, cfg: config_lib.Config) -> None:
        cfg.save(self.config_path)

    def vocab_file(self, cfg: config_lib.Config) -> str:
        """data.vocab_path if set, else <model_dir>/vocab.txt."""
        return vocab_lib.vocab_path_for(self.path, cfg.data.vocab_path)

    def read_vocab(self, cfg: config_lib.Config) -> vocab_lib.Vocab:
        path = self.vocab_path if os.path.exists(self.vocab_path) else self.vocab_file(cfg)
        if not tf.io.gfile.exists(path):
            raise UserError(f"model dir {self.path} has no vocab.txt")
        return vocab_lib.Vocab.load(path, cfg.data.vocab_size)

    def read_abs_plus(self) -> dict | None:
        """abs_plus.json (the tuned ABS+ weights, pgn_tf.tune), or None when there is none."""
        if not os.path.exists(self.abs_plus_json):
            return None
        try:
            with open(self.abs_plus_json) as f:
                info = json.load(f)
        except ValueError as e:
            raise UserError(f"{self.abs_plus_json} is not JSON ({e}): tune again or remove it") from None
        if not isinstance(info, dict) or not isinstance(info.get("weights"), str):
            raise UserError(f"{self.abs_plus_json} has no \"weights\" string: tune again or "
                            "remove it")
        return info

    def write_abs_plus(self, info: dict) -> None:
        write_json(self.abs_plus_json, info, indent=2)

    # -- checkpoints ------------------------------------------------------------------------

    def latest_checkpoint(self) -> str | None:
        return tf.train.latest_checkpoint(self.ckpt_dir)

    def read_best(self) -> dict | None:
        """best.json, or None when there is no best checkpoint."""
        if not tf.train.latest_checkpoint(self.best_dir) or not os.path.exists(self.best_json):
            return None
        with open(self.best_json) as f:
            return json.load(f)

    def write_best(self, info: dict) -> None:
        write_json(self.best_json, info, indent=2)

    def best_checkpoint(self, cfg: config_lib.Config | None = None) -> str | None:
        """The best checkpoint, if it was chosen by cfg's measure (any measure without cfg)."""
        info = self.read_best()
        if info is None:
            return None
        if cfg is not None and info.get("metric") != config_lib.best_measure(cfg)[0]:
            return None
        return tf.train.latest_checkpoint(self.best_dir)

    def find_checkpoint(self, which: str = "best", cfg: config_lib.Config | None = None) -> str:
        """`which`: "best" (the best of the current phase, else the latest), "latest" (the
        latest, else the best), or a checkpoint path (`.../ckpt-1200`). UserError if none."""
        if not os.path.isdir(self.path):
            raise UserError(f"model dir {self.path} does not exist")
        if which not in ("best", "latest"):
            if not tf.io.gfile.glob(which + ".index"):
                raise UserError(f"checkpoint {which} does not exist (give best, latest or a "
                                f"checkpoint path such as {self.ckpt_dir}/ckpt-1000)")
            return which
        best, latest = self.best_checkpoint(cfg), self.latest_checkpoint()
        path = (best or latest) if which == "best" else (latest or best)
        if not path:
            raise UserError(f"model dir {self.path} has no checkpoint "
                            f"(run python -m pgn_tf.train first)")
        return path

    def load_model(self, which: str = "best"):
        """(cfg, vocab, model, checkpoint path) restored from the model dir."""
        cfg = self.read_config()
        path = self.find_checkpoint(which, cfg)
        vocab = self.read_vocab(cfg)
        model = build_model(cfg.model, vocab.size)
        restore_model(model, path)
        return cfg, vocab, model, path


def restore_model(model, path: str) -> None:
    """Restores a model's weights from a training checkpoint. A variable the checkpoint lacks
    is an error, except coverage's w_c in a checkpoint from before the coverage conversion,
    which stays at its zero initialisation (the converted model equals the original)."""
    status = tf.train.Checkpoint(model=model).restore(path).expect_partial()
    names = {n for n, _ in tf.train.list_variables(path)}
    if not any("attention/w_c" in n for n in names) and getattr(model, "coverage", False):
        return  # converted: w_c keeps its zeros; everything else was matched above
    try:
        status.assert_existing_objects_matched()
    except AssertionError:
        raise UserError(
            f"{path} does not hold every weight of this model: it was written for another "
            f"architecture, or by a version of pgn_tf whose model it does not match (a "
            f"convolutional ABS encoder trained before its layers were checkpointed, "
            f"docs/results/quality.md \"Rush et al.'s ABS, re-run\"); retrain it") from None


def checkpoint_embedding_rows(path: str) -> int | None:
    """The vocabulary size a checkpoint was trained with (rows of its embedding matrix)."""
    for name, shape in tf.train.list_variables(path):
        if "embedding" in name and "embeddings" in name and "optimizer" not in name:
            return shape[0]
    return None


def phase_change(old: config_lib.Config, new: config_lib.Config, model_dir: str) -> bool:
    """Whether `new` may continue the model dir trained with `old`, and how.

    Raises UserError if the architecture differs. Returns True when training continues with a
    fresh optimizer: the coverage conversion (old without coverage, new with), a change of
    objective (Paulus et al.'s ML -> mixed phase) or of train.phase_name (a named restart);
    False for a plain resume."""
    for key in ARCHITECTURE_KEYS:
        a, b = getattr(old.model, key, None), getattr(new.model, key, None)
        if a != b:
            raise UserError(
                f"model dir {model_dir} holds a model with model.{key}={a}, but this run asks "
                f"for model.{key}={b}; use a new --model_dir"
            )
    if old.model.coverage and not new.model.coverage:
        raise UserError(
            f"model dir {model_dir} holds a coverage model; it cannot continue without coverage"
        )
    return ((new.model.coverage and not old.model.coverage)
            or new.train.objective != old.train.objective
            or new.train.phase_name != old.train.phase_name)
