"""Containment over a version's whole tree (serving.models): every file the loader may open, at
any depth, resolves inside --model_base_path. A version holding a link that leads out, however
deep, is refused with one warning and never served, while the version already serving keeps
serving; links that stay inside are served. Real SavedModels, real links on a real file system.
"""

import os
import shutil

import pytest

from pgn_tf.serving import models
from pgn_tf.serving.models import LoadedVersion, ModelSpec, ServedModel
from pgn_tf.serving.service import Server
from tests.serving.helpers import add_version, request, stub, summaries

DATA = os.path.join("variables", "variables.data-00000-of-00001")

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix",
                                reason="needs symbolic links")


@pytest.fixture
def tree(tiny_model, tmp_path):
    """(base with version 1, a copy of the model outside the base)."""
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    outside = str(tmp_path / "outside")
    shutil.copytree(tiny_model, outside)
    return base, outside


def _version(base, v, tiny_model) -> str:
    """A copy of the model as version dir `v`, to be changed before the poll sees it."""
    path = os.path.join(base, str(v))
    shutil.copytree(tiny_model, path)
    return path


def _relink(link: str, target: str) -> None:
    """Replaces the file or dir at `link` with a symbolic link to `target`."""
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    else:
        os.remove(link)
    os.symlink(target, link)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "leads out of" in r.getMessage()]


def _poll(model, caplog, times=2) -> list[str]:
    with caplog.at_level("WARNING", logger="serving"):
        for _ in range(times):
            model.poll()
    return _warnings(caplog)


def test_a_variables_file_linked_out_is_refused_and_the_old_version_keeps_serving(
        tree, tiny_model, tmp_path, caplog):
    base, outside = tree
    srv = Server({"m": base}, poll_seconds=0)
    try:
        v2 = _version(base, 2, tiny_model)
        _relink(os.path.join(v2, DATA), os.path.join(outside, DATA))
        with caplog.at_level("WARNING", logger="serving"):
            srv.registry.poll_all()
            srv.registry.poll_all()
        assert srv.registry.models["m"].loaded_versions() == [1]
        assert summaries(stub(srv).Predict(request({"articles": ["a"]}, name="m"),
                                           timeout=30)) == ["a"]
        warnings = _warnings(caplog)
        assert len(warnings) == 1 and repr(DATA) in warnings[0], warnings
        assert "'2'" in warnings[0] and str(tmp_path) not in warnings[0]
    finally:
        srv.stop()


@pytest.mark.parametrize("where", [
    os.path.join("assets", "vocab.txt"),  # an asset file
    os.path.join("assets.extra", "tf_serving_warmup_requests"),  # the warm-up file
    os.path.join("assets", "a", "b", "c", "deep.txt"),  # a file deep down
])
def test_a_file_linked_out_at_any_depth_is_refused(tree, tiny_model, tmp_path, caplog, where):
    base, _ = tree
    secret = tmp_path / "secret.txt"
    secret.write_text("not for serving")
    v2 = _version(base, 2, tiny_model)
    os.makedirs(os.path.dirname(os.path.join(v2, where)), exist_ok=True)
    os.symlink(secret, os.path.join(v2, where))
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert [v for v, _, _ in model.status()] == [1]  # version 2 never even tried
    assert len(warnings) == 1 and repr(where) in warnings[0], warnings


def test_a_dir_linked_out_deep_down_is_refused(tree, tiny_model, tmp_path, caplog):
    base, _ = tree
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "big").mkdir(parents=True)
    v2 = _version(base, 2, tiny_model)
    os.makedirs(os.path.join(v2, "assets", "sub"))
    os.symlink(elsewhere, os.path.join(v2, "assets", "sub", "linked"))
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert len(warnings) == 1 and repr(os.path.join("assets", "sub", "linked")) in warnings[0]


def test_a_link_inside_that_leads_to_a_link_out_is_refused(tree, tiny_model, caplog):
    """variables/ links to a dir inside the base, whose data file links out: the tree as the
    loader reads it (through the first link) leads out."""
    base, outside = tree
    staging = os.path.join(base, ".staging")
    shutil.copytree(os.path.join(tiny_model, "variables"), staging)
    _relink(os.path.join(staging, os.path.basename(DATA)), os.path.join(outside, DATA))
    v2 = _version(base, 2, tiny_model)
    _relink(os.path.join(v2, "variables"), staging)
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert len(warnings) == 1 and repr(DATA) in warnings[0], warnings


def test_links_that_stay_inside_are_served(tree, tiny_model, caplog):
    """A variables file, a variables dir and an asset linked to copies inside the base, and a
    link loop back to the version dir: all resolve inside, so the version is served (and the
    loop is walked once)."""
    base, _ = tree
    shared = os.path.join(base, ".shared")
    shutil.copytree(tiny_model, shared)
    v2 = _version(base, 2, tiny_model)
    _relink(os.path.join(v2, DATA), os.path.join(shared, DATA))
    v3 = _version(base, 3, tiny_model)
    _relink(os.path.join(v3, "variables"), os.path.join(shared, "variables"))
    os.makedirs(os.path.join(v3, "assets"), exist_ok=True)
    os.symlink(os.path.join(shared, "saved_model.pb"), os.path.join(v3, "assets", "copy.pb"))
    os.symlink(v3, os.path.join(v3, "assets", "loop"))
    model = ServedModel("m", ModelSpec(base, "all"))
    assert _poll(model, caplog) == []
    assert model.loaded_versions() == [1, 2, 3]


def test_a_link_out_swapped_in_while_the_version_loads_is_refused_after_the_load(
        tree, tiny_model, caplog):
    """The tree is checked again once the version has loaded (and replayed its warm-up), before
    it is marked AVAILABLE: a link put in during the load is caught."""
    base, outside = tree

    def load_then_swap(name, version, path):
        loaded = LoadedVersion(name, version, path)
        if version == 2:
            _relink(os.path.join(path, DATA), os.path.join(outside, DATA))
        return loaded

    model = ServedModel("m", ModelSpec(base, "all"), load=load_then_swap)
    model.poll()
    _version(base, 2, tiny_model)
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    status = {v: (s, m) for v, s, m in model.status()}
    assert status[2] == ("END", "refused: it leads out of the base path")
    assert len(warnings) == 1 and repr(DATA) in warnings[0], warnings


def test_a_tree_too_large_to_check_is_refused(tree, tiny_model, caplog, monkeypatch):
    base, _ = tree
    monkeypatch.setattr(models, "_TREE_MAX_ENTRIES", 8)  # the tiny model has about 5
    v2 = _version(base, 2, tiny_model)
    for i in range(8):
        with open(os.path.join(v2, f"extra{i}"), "w") as f:
            f.write("x")
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert len(warnings) == 1 and "more than 8 entries" in warnings[0], warnings
