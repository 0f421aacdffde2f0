"""pgn_tf: pointer-generator summarization (See et al. 2017) and relatives in TensorFlow 2 / Keras 3.

    import pgn_tf
    s = pgn_tf.Summarizer.from_model_dir("runs/pgn")      # or .from_saved_model("export/pgn/3")
    s(["article one ...", "article two ..."])             # -> ["summary one", "summary two"]
    cfg = pgn_tf.config.resolve("see2017_pgn")
    model = pgn_tf.PointerGenerator(50_000, 256, 128, coverage=True)

The names below are imported on first use, so `import pgn_tf` does not start TensorFlow;
everything else stays in its module (pgn_tf.train, pgn_tf.evaluate, pgn_tf.export, ...).

The package's top level holds the commands (`python -m pgn_tf.VERB`: train, evaluate,
summarize, export, average_checkpoints, tune, significance, quickstart) and the concepts every
part shares (config and presets, text and vocab, objectives, inference, model_dir); the rest is
grouped by job: data/, layers/, ops/, models/, decoding/, training/, metrics/, saved_model/,
utils/, and, installed from the repository's top-level folders, serving/ and pipelines/
(README: code map).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute; None for the module itself)
_EXPORTS = {
    "Summarizer": ("pgn_tf.inference.summarizer", "Summarizer"),
    "SavedModelSummarizer": ("pgn_tf.inference.saved_model", "SavedModelSummarizer"),
    "config": ("pgn_tf.config", None),
    "objectives": ("pgn_tf.objectives", None),
    "Config": ("pgn_tf.config", "Config"),
    "build_model": ("pgn_tf.models", "build_model"),
    "PointerGenerator": ("pgn_tf.models.pointer_generator", "PointerGenerator"),
    "DeepReinforced": ("pgn_tf.models.deep_reinforced", "DeepReinforced"),
    "ABS": ("pgn_tf.models.abs", "ABS"),
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pgn_tf' has no attribute '{name}'")
    module, attr = _EXPORTS[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
