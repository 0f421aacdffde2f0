"""Keras models assembling the layers; `build_model(cfg, vocab_size)` picks one by config."""

from __future__ import annotations


def build_model(model_cfg, vocab_size: int):
    from pgn_tf.models.abs import ABS
    from pgn_tf.models.deep_reinforced import DeepReinforced
    from pgn_tf.models.pointer_generator import PointerGenerator

    models = {"pointer_generator": PointerGenerator, "deep_reinforced": DeepReinforced,
              "abs": ABS}
    if model_cfg.model_type not in models:
        raise ValueError(f"unknown model.model_type '{model_cfg.model_type}' "
                         f"({', '.join(models)})")
    return models[model_cfg.model_type].from_config_obj(model_cfg, vocab_size)
