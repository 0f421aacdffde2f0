"""Shared fixtures: quiet TF logs, a tiny synthetic corpus and vocab written once per session.

The suite runs on two pytest-xdist workers (pyproject.toml); each has its own session, so the
costly session fixtures (the trained model, its export) are built once for both: the first
worker to need one builds it under a lock in the run's shared temporary directory, the other
waits and reuses it. Tests only read them."""

import fcntl
import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from pgn_tf.utils import onednn  # noqa: E402

# TensorFlow's kernels as the commands run them (oneDNN on where unset, every x86-64 CPU), set
# before any test loads TensorFlow; the processes the tests start inherit it.
onednn.start()


def shared(tmp_path_factory, name, build):
    """build(dir) -> a JSON-able value, run once per test run (not once per xdist worker); the
    value is returned to every caller. A build that raised is retried by the next caller."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent  # the run's dir, above each worker's own
    out, done = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the holder dies
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            done.write_text(json.dumps({"value": build(out)}))
    return json.loads(done.read_text())["value"]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    from pgn_tf.data import synthetic

    return shared(tmp_path_factory, "synthetic", lambda out: synthetic.write_corpus(
        str(out), num_train=400, num_eval=40, seed=0))


@pytest.fixture(scope="session")
def tiny_cfg():
    from pgn_tf import config

    cfg = config.preset("tiny")
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
    from pgn_tf.training.run import train

    def build(model_dir):
        train(str(model_dir), "tiny", [
            "train.max_steps=300", "train.eval_every=100", "train.checkpoint_every=100",
            "model.hidden_dim=48", "model.emb_dim=24", "decode.max_dec_steps=16"],
            train_data=corpus["train"], eval_data=corpus["validation"], progress=False)
        return str(model_dir)

    return shared(tmp_path_factory, "trained", build)


@pytest.fixture(scope="session")
def exported(trained_model_dir, tmp_path_factory):
    """(export_base, name, version dir) of the trained model."""
    from pgn_tf.saved_model import export

    def build(base):
        return [str(base), "pgn", export.export(trained_model_dir, str(base), "pgn", version=1)]

    return tuple(shared(tmp_path_factory, "export", build))
