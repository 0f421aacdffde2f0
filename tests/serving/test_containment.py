"""Containment (serving.containment): every file the loader may open resolves inside
--model_base_path. A version holding a link that leads out, however deep, or whose SavedModel
names an asset file that the loader would open outside (an absolute path, a `..` component), is
refused with one warning and never served, while the version already serving keeps serving;
links and asset names that stay inside are served. Real SavedModels, real links on a real file
system.
"""

import os
import shutil

import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from pgn_tf.serving import containment
from pgn_tf.serving.models import LoadedVersion, ModelSpec, ServedModel
from pgn_tf.serving.service import Server
from pgn_tf.serving.status import echo
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
    monkeypatch.setattr(containment, "TREE_MAX_ENTRIES", 8)  # the tiny model has about 5
    v2 = _version(base, 2, tiny_model)
    for i in range(8):
        with open(os.path.join(v2, f"extra{i}"), "w") as f:
            f.write("x")
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert len(warnings) == 1 and "more than 8 entries" in warnings[0], warnings


# --- asset files a SavedModel names ------------------------------------------------------------

VOCAB = "apple\nbanana\n"
SECRET = "secret\n"  # the file outside the base path that an export must not make the server read


class AssetModel(tf.Module):
    """A real SavedModel with an asset: a vocabulary table read from its file when it loads;
    scores = each article's line number in the vocabulary (-1: not in it)."""

    def __init__(self, vocab: str):
        super().__init__()
        self.vocab = tf.saved_model.Asset(vocab)
        self.table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            self.vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER), -1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles")])
    def serve(self, articles):
        return {"summaries": articles, "scores": tf.cast(self.table.lookup(articles), tf.float32)}


@pytest.fixture(scope="module")
def asset_model(tmp_path_factory):
    """A SavedModel dir whose assets/vocab.txt it reads when it loads."""
    root = tmp_path_factory.mktemp("asset")
    (root / "vocab.txt").write_text(VOCAB)
    m = AssetModel(str(root / "vocab.txt"))
    path = str(root / "model")
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


@pytest.fixture
def asset_base(asset_model, tmp_path):
    """(base with the honest version 1, the path of a file outside the base)."""
    base = str(tmp_path / "m")
    add_version(base, 1, asset_model)
    (tmp_path / "outside.txt").write_text(SECRET)
    return base, str(tmp_path / "outside.txt")


def _saved_model(version_dir) -> saved_model_pb2.SavedModel:
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
        return saved_model_pb2.SavedModel.FromString(f.read())


def _rename_asset(version_dir, filename, text=False) -> None:
    """Rewrites the asset filename in the version's saved_model.pb (text=True: replaces it by a
    saved_model.pbtxt, the form TF reads when there is no saved_model.pb)."""
    sm = _saved_model(version_dir)
    (asset,) = sm.meta_graphs[0].asset_file_def
    asset.filename = filename
    os.remove(os.path.join(version_dir, "saved_model.pb"))
    if text:
        with open(os.path.join(version_dir, "saved_model.pbtxt"), "w") as f:
            f.write(text_format.MessageToString(sm))
    else:
        with open(os.path.join(version_dir, "saved_model.pb"), "wb") as f:
            f.write(sm.SerializeToString())


def _scores(loaded, words) -> list[float]:
    """The scores of `words` by a LoadedVersion or a tf.saved_model.load module."""
    sig = loaded.signatures["serving_default"]
    out = getattr(sig, "fn", sig)(articles=tf.constant(words))
    return out["scores"].numpy().tolist()


def test_the_loader_opens_an_asset_filename_that_leads_out(asset_base, asset_model):
    """What the check guards against, shown on the loader itself: TF joins the filename with
    assets/ and reads the file outside the base path."""
    base, outside = asset_base
    for v, filename in ((2, "../../../outside.txt"), (3, outside)):
        path = os.path.join(base, str(v))
        shutil.copytree(asset_model, path)
        _rename_asset(path, filename)
        assert _scores(LoadedVersion("m", v, path), ["secret", "apple"]) == [0.0, -1.0]


@pytest.mark.parametrize("filename", [
    "../../../outside.txt",  # out of the base
    "../../outside.txt",  # base/outside.txt: inside, but any '..' is refused
    "sub/../../assets/vocab.txt",
    "OUTSIDE",  # the absolute path of the file outside the base
])
def test_an_asset_filename_that_leads_out_is_refused(asset_base, asset_model, caplog, filename):
    base, outside = asset_base
    filename = outside if filename == "OUTSIDE" else filename
    v2 = _version(base, 2, asset_model)
    _rename_asset(v2, filename)
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    assert [v for v, _, _ in model.status()] == [1]  # version 2 never even tried
    assert len(warnings) == 1, warnings
    # the name as the warning quotes it: cut, as a long temporary path is
    assert "'2'" in warnings[0] and f"asset file {echo(filename)!r}" in warnings[0], warnings
    assert _scores(model.get(1), ["apple", "banana", "secret"]) == [0.0, 1.0, -1.0]


def test_the_text_form_is_checked_where_tf_reads_it(asset_base, asset_model, caplog):
    """No saved_model.pb: tf.saved_model.load reads saved_model.pbtxt (and opens its assets;
    LoadedVersion fails after that, reading its signature defs from saved_model.pb), so the
    check reads it too."""
    base, outside = asset_base
    _rename_asset(_version(base, 2, asset_model), outside, text=True)
    _rename_asset(_version(base, 3, asset_model), "vocab.txt", text=True)
    model = ServedModel("m", ModelSpec(base, "all"))
    with caplog.at_level("WARNING", logger="serving"):
        assert model.versions_on_disk() == [1, 3]
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "saved_model.pbtxt" in warnings[0] and "'2'" in warnings[0]
    assert _scores(tf.saved_model.load(os.path.join(base, "3")), ["banana"]) == [1.0]


def test_a_saved_model_pb_rewritten_while_it_loads_is_refused_after_the_load(
        asset_base, asset_model, caplog):
    base, outside = asset_base

    def load_then_rewrite(name, version, path):
        loaded = LoadedVersion(name, version, path)
        if version == 2:
            _rename_asset(path, outside)
        return loaded

    model = ServedModel("m", ModelSpec(base, "all"), load=load_then_rewrite)
    model.poll()
    _version(base, 2, asset_model)
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == [1]
    status = {v: (s, m) for v, s, m in model.status()}
    assert status[2] == ("END", "refused: it leads out of the base path")
    assert len(warnings) == 1 and f"asset file {echo(outside)!r}" in warnings[0], warnings


def test_a_saved_model_pb_that_does_not_parse_fails_closed(asset_base, asset_model, caplog):
    """Listed, it is left to the loader, which fails on it; after a load it must parse, or the
    version is not served."""
    base, _ = asset_base
    v2 = _version(base, 2, asset_model)
    with open(os.path.join(v2, "saved_model.pb"), "wb") as f:
        f.write(b"half a model")
    model = ServedModel("m", ModelSpec(base, "all"))
    assert _poll(model, caplog, times=1) == []
    status = {v: (s, m) for v, s, m in model.status()}
    assert status[2][0] == "END" and "failed to load" in status[2][1]

    def load_then_break(name, version, path):
        loaded = LoadedVersion(name, version, path)
        with open(os.path.join(path, "saved_model.pb"), "wb") as f:
            f.write(b"half a model")
        return loaded

    shutil.rmtree(v2)
    _version(base, 2, asset_model)
    model = ServedModel("m", ModelSpec(base, "all"), load=load_then_break)
    warnings = _poll(model, caplog, times=1)
    assert model.loaded_versions() == []
    assert {s for _, s, _ in model.status()} == {"END"}
    assert len(warnings) == 2 and all("does not parse (DecodeError) after the load" in w
                                      for w in warnings), warnings


def test_a_served_version_whose_saved_model_pb_changes_is_checked_again(asset_base, caplog):
    """The check of a version is kept only while its saved_model.pb is the same file."""
    base, outside = asset_base
    model = ServedModel("m", ModelSpec(base, "all"))
    assert _poll(model, caplog) == [] and model.loaded_versions() == [1]
    _rename_asset(os.path.join(base, "1"), outside)
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == []
    assert len(warnings) == 1 and "'1'" in warnings[0], warnings


def test_a_saved_model_pb_too_large_to_check_is_refused(asset_base, asset_model, caplog,
                                                        monkeypatch):
    base, _ = asset_base
    v2 = _version(base, 2, asset_model)
    size = os.path.getsize(os.path.join(v2, "saved_model.pb"))
    monkeypatch.setattr(containment, "SAVED_MODEL_MAX_BYTES", size - 1)
    model = ServedModel("m", ModelSpec(base, "all"))
    warnings = _poll(model, caplog)
    assert model.loaded_versions() == []  # versions 1 and 2: the same file
    assert len(warnings) == 2 and all(f"larger than {size - 1} bytes" in w for w in warnings)


def test_a_saved_model_pb_that_is_not_a_regular_file_is_refused(asset_base, asset_model, caplog):
    """A FIFO would block the loader (and a check that opened it plainly)."""
    base, _ = asset_base
    v2 = _version(base, 2, asset_model)
    os.remove(os.path.join(v2, "saved_model.pb"))
    os.mkfifo(os.path.join(v2, "saved_model.pb"))
    model = ServedModel("m", ModelSpec(base, "all"))
    with caplog.at_level("WARNING", logger="serving"):
        model.poll()
    assert model.loaded_versions() == [1]
    assert any("saved_model.pb is not a regular file" in r.getMessage() for r in caplog.records)


def test_a_long_asset_filename_is_cut_in_the_warning(asset_base, asset_model, caplog):
    base, _ = asset_base
    filename = "../" + "x" * 5000
    _rename_asset(_version(base, 2, asset_model), filename)
    model = ServedModel("m", ModelSpec(base, "all"))
    (warning,) = _poll(model, caplog)
    assert "(5003 characters)" in warning and len(warning) < 500, warning


@pytest.mark.parametrize("name, problem", [
    ("vocab.txt", None), ("sub/vocab.txt", None), ("..vocab", None), ("vocab..", None),
    ("", None),
    ("/etc/passwd", "absolute"), ("\\\\host\\share\\x", "absolute"), ("\\x", "absolute"),
    ("C:\\x", "drive"), ("c:x", "drive"),
    ("..", "'..'"), ("a/../../x", "'..'"), ("a\\..\\x", "'..'"), ("./../x", "'..'"),
    ("x\x00y", "NUL"),
])
def test_asset_names(name, problem):
    got = containment.asset_name_problem(name)
    assert got is None if problem is None else problem in got, (name, got)


def test_a_tf1_assets_collection_is_read():
    """A TF1 export may list its asset files in the saved_model_assets collection alone
    (loader_impl.get_asset_tensors reads it when asset_file_def is empty)."""
    sm = saved_model_pb2.SavedModel()
    mg = sm.meta_graphs.add()
    mg.asset_file_def.add(filename="vocab.txt")
    packed = mg.collection_def["saved_model_assets"].any_list.value.add()
    packed.Pack(meta_graph_pb2.AssetFileDef(filename="/etc/passwd"))
    assert containment.asset_filenames(sm) == ["vocab.txt", "/etc/passwd"]


def test_asset_names_are_checked_on_a_remote_store(asset_model, tmp_path, caplog):
    """A base path that is no local dir has no links, but an absolute asset filename still
    leads out of it (os.path.join drops the store's assets dir): TF's RAM file system."""
    base = f"ram://{tmp_path.name}/m"
    sm = _saved_model(asset_model)
    for v, filename in ((1, "vocab.txt"), (2, "/etc/passwd")):
        sm.meta_graphs[0].asset_file_def[0].filename = filename
        tf.io.gfile.makedirs(f"{base}/{v}")
        with tf.io.gfile.GFile(f"{base}/{v}/saved_model.pb", "wb") as f:
            f.write(sm.SerializeToString())
    model = ServedModel("m", ModelSpec(base, "all"))
    try:
        with caplog.at_level("WARNING", logger="serving"):
            assert model.versions_on_disk() == [1]
            assert model.versions_on_disk() == [1]
        warnings = _warnings(caplog)
        assert len(warnings) == 1 and "'/etc/passwd'" in warnings[0], warnings
    finally:
        tf.io.gfile.rmtree(f"ram://{tmp_path.name}")


def test_an_asset_name_that_resolves_outside_through_a_link_is_refused(tmp_path):
    """The names are resolved too (the tree walk refuses such a link first; this is the check
    of the names alone)."""
    base = tmp_path / "m"
    (base / "1" / "assets").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text(SECRET)
    os.symlink(tmp_path / "outside.txt", base / "1" / "assets" / "vocab.txt")
    why = containment.names_leave("saved_model.pb", ["ok.txt", "vocab.txt"], str(base / "1"),
                                  os.path.realpath(base))
    assert "'vocab.txt'" in why and "resolves outside" in why, why
    assert containment.names_leave("saved_model.pb", ["ok.txt"], str(base / "1"),
                                   os.path.realpath(base)) is None
