"""Fixtures of the serving tests: the real exported summarizer served in-process, and tiny real
SavedModels for the version-lifecycle tests."""

import os

import pytest

from tests.serving.helpers import METRICS_PATH, write_spin_model, write_tiny_model


@pytest.fixture(scope="module")
def server(exported):
    """The exported pointer-generator behind gRPC + REST (+ metrics), no batching."""
    from pgn_tf.serving.service import Server

    base, name, _ = exported
    srv = Server({name: os.path.join(base, name)}, rest_port="auto", poll_seconds=0.2,
                 metrics_path=METRICS_PATH)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny SavedModel dir (copy it into version dirs)."""
    return write_tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def heavy_tiny_model(tmp_path_factory):
    """The tiny model with a 16 MB weight."""
    return write_tiny_model(str(tmp_path_factory.mktemp("heavy") / "model"), payload_mb=16)


@pytest.fixture(scope="session")
def spin_model(tmp_path_factory):
    """A SavedModel whose run lasts as many loop steps as its `steps` input asks."""
    return write_spin_model(str(tmp_path_factory.mktemp("spin") / "model"))
