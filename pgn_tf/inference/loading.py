"""A model dir's model, ready to decode: its config with the decoding settings a run asks for,
its vocabulary and its restored weights (pgn_tf.model_dir reads the dir).

The decoding config is settled here, once, before anything decodes: the model dir's config.json,
then the ABS+ weights `python -m pgn_tf.tune` wrote into the dir (abs_plus.json), then the
caller's decode.* overrides (`--set`). Which ABS+ weights were taken, and from where, is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pgn_tf import config as config_lib
from pgn_tf.decoding import features as features_lib
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf")

ABS_PLUS_KEY = "decode.abs_plus_weights"


def decode_config(cfg: config_lib.Config, model_dir: str, overrides: Sequence[str] = (),
                  where: str = "decoding") -> config_lib.Config:
    """`cfg` (a model dir's config) with the dir's tuned ABS+ weights (abs_plus.json, unless
    `overrides` set decode.abs_plus_weights) and then `overrides` ("decode.key=value"; any
    other key is a UserError naming `where`) applied, validated. Logs the ABS+ weights' source."""
    overrides = list(overrides or [])
    config_lib.apply_decode_overrides(cfg, overrides, where)
    if any(o.split("=", 1)[0].strip() == ABS_PLUS_KEY for o in overrides):
        tuned = ModelDir(model_dir).read_abs_plus()
        if tuned is not None:
            log.info("ABS+ weights %s overridden by --set (not %s's %s)",
                     cfg.decode.abs_plus_weights or '""', ModelDir(model_dir).abs_plus_json,
                     tuned["weights"])
        return cfg
    tuned = ModelDir(model_dir).read_abs_plus()
    if tuned is not None:
        features_lib.parse_weights(tuned["weights"])  # ValueError naming the weights if bad
        cfg.decode.abs_plus_weights = tuned["weights"]
        log.info("ABS+ weights %s from %s", tuned["weights"], ModelDir(model_dir).abs_plus_json)
    return cfg.validate()


def load_model(model_dir: str, which: str = "best", overrides: Sequence[str] = (),
               where: str = "decoding"):
    """(cfg, vocab, model, checkpoint path) restored from a model dir (`which`: best, latest
    or a checkpoint path), cfg's decoding settled by `decode_config`."""
    cfg, vocab, model, path = ModelDir(model_dir).load_model(which)
    return decode_config(cfg, model_dir, overrides, where), vocab, model, path


def load_summarizer(model_dir: str | None = None, saved_model: str | None = None, *,
                    checkpoint: str = "best", overrides: Sequence[str] = (),
                    where: str = "summarize"):
    """The summarizer of a model dir (compiled in process, its decoding settled by
    `decode_config`) or of an export's version dir: exactly one of the two. An export's
    decoding is fixed in its graph: `overrides` and `checkpoint` need a model dir."""
    if bool(model_dir) == bool(saved_model):
        raise UserError("give one of --model_dir or --saved_model")
    if saved_model:
        if overrides or checkpoint != "best":
            raise UserError("--set and --checkpoint need --model_dir (an export's decoding "
                            "settings are fixed: python -m pgn_tf.export --set ...)")
        from pgn_tf.inference.saved_model import SavedModelSummarizer

        return SavedModelSummarizer(saved_model)
    from pgn_tf.inference.summarizer import Summarizer

    return Summarizer.from_model_dir(model_dir, checkpoint, overrides, where)
