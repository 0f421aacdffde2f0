"""pgn_tf: pointer-generator summarization (See et al. 2017) and relatives in TensorFlow 2 / Keras 3."""

__version__ = "0.1.0"
