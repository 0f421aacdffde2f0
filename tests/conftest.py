"""Shared fixtures: quiet TF logs, a tiny synthetic corpus and vocab written once per session."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    from pgn_tf.data import synthetic

    out = tmp_path_factory.mktemp("synthetic")
    return synthetic.write_corpus(str(out), num_train=400, num_eval=40, seed=0)


@pytest.fixture(scope="session")
def tiny_cfg():
    from pgn_tf import config

    cfg = config.tiny()
    cfg.data.max_enc_steps = 60
    cfg.data.max_dec_steps = 12
    return cfg


@pytest.fixture(scope="session")
def vocab(corpus, tiny_cfg):
    import tensorflow as tf

    from pgn_tf.data import dataset

    return dataset.build_vocab(sorted(tf.io.gfile.glob(corpus["train"])), tiny_cfg.data)
