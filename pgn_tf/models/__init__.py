"""Keras models assembling the layers; `build_model(cfg, vocab_size)` picks one by config."""

from __future__ import annotations


def build_model(model_cfg, vocab_size: int):
    from pgn_tf.models.pointer_generator import PointerGenerator

    if model_cfg.model_type == "pointer_generator":
        return PointerGenerator.from_config_obj(model_cfg, vocab_size)
    raise ValueError(f"unknown model.model_type '{model_cfg.model_type}'")
