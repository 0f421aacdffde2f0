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


@pytest.fixture(scope="session")
def trained_model_dir(tmp_path_factory, corpus):
    """A tiny pointer-generator trained on the synthetic corpus until it copies (in-process)."""
    from pgn_tf import train

    model_dir = str(tmp_path_factory.mktemp("trained"))
    args = train.build_parser().parse_args([
        "--model_dir", model_dir, "--config", "tiny", "--quiet",
        "--train_data", corpus["train"], "--eval_data", corpus["validation"],
        "--set", "train.max_steps=300", "--set", "train.eval_every=100",
        "--set", "train.checkpoint_every=100", "--set", "model.hidden_dim=48",
        "--set", "model.emb_dim=24", "--set", "decode.max_dec_steps=16",
    ])
    train.run(args)
    return model_dir


@pytest.fixture(scope="session")
def exported(trained_model_dir, tmp_path_factory):
    """(export_base, name, version dir) of the trained model."""
    from pgn_tf import export

    base = str(tmp_path_factory.mktemp("export"))
    path = export.export(trained_model_dir, base, "pgn", version=1)
    return base, "pgn", path
