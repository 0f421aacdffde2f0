"""The export in TensorFlow's C runtime (the one stock tensorflow_model_server embeds), in a
process with no Python: the same summaries as the Python server, and only ops that runtime can
run. A py_function or a tensorflow-text op in an export is named by the op check."""

import os

import pytest
import tensorflow as tf

from pgn_tf.saved_model import graph_check
from pgn_tf.serving import client
from tests.serving.helpers import ARTICLE, request, stub
from tools import c_runtime

ARTICLES = [ARTICLE, "", "the council said on monday that the bridge near the station would "
            "be repaired .", "café zürich — naïve façade 東京 ."]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """The C program, compiled against the installed wheel (a missing compiler or C API fails
    here, naming it: the suite needs gcc, as .ci/run's image has)."""
    return c_runtime.build(str(tmp_path_factory.mktemp("capi")))


def test_serving_default_in_the_c_runtime_answers_as_the_python_server(runner, server,
                                                                      exported):
    _, _, path = exported
    out = c_runtime.run_signature(runner, path, "serving_default", {"articles": ARTICLES})
    python = stub(server).Predict(request({"articles": ARTICLES}), timeout=60)
    assert [s.decode() for s in out["summaries"]] == client.summarize(
        f"127.0.0.1:{server.port}", "pgn", ARTICLES, timeout=60)
    assert out["scores"] == pytest.approx(tf.make_ndarray(python.outputs["scores"]).tolist(),
                                          abs=1e-5)
    assert out["summaries"][0]  # a real summary, not an empty string compared with another


@pytest.mark.slow
def test_summarize_options_in_the_c_runtime_answers_as_the_python_server(runner, server,
                                                                        exported):
    _, _, path = exported
    scalars = {"beam_size": 2, "max_decode_steps": 6, "min_decode_steps": 1}
    out = c_runtime.run_signature(runner, path, "summarize_options",
                                  {"articles": ARTICLES[:2], **scalars})
    resp = stub(server).Predict(request(
        {"articles": ARTICLES[:2], **{k: tf.make_tensor_proto(v, tf.int32)
                                      for k, v in scalars.items()}},
        signature="summarize_options"), timeout=60)
    assert out["summaries"] == tf.make_ndarray(resp.outputs["summaries"]).tolist()
    assert all(len(s.split()) <= 6 for s in out["summaries"])
    with pytest.raises(RuntimeError, match="beam_size must be between 1 and 16"):
        c_runtime.run_signature(runner, path, "summarize_options",
                                {"articles": ARTICLES[:1], **scalars, "beam_size": 99})


@pytest.mark.slow
def test_the_export_holds_only_ops_the_c_runtime_registers(runner, exported):
    _, _, path = exported
    registered = c_runtime.registered_ops(runner)
    assert "StatelessWhile" in registered or "While" in registered
    ops = graph_check.saved_model_ops(path)
    assert len(ops) > 50 and any(w.startswith("function ") for w in ops.values())
    assert graph_check.unservable_ops(path, registered) == {}
    assert graph_check.unservable_ops(path) == {}  # against a fresh TensorFlow-only process


class PyFunctionModel(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles")])
    def serve(self, articles):
        upper = tf.py_function(lambda a: tf.strings.upper(a), [articles], tf.string)
        return {"summaries": tf.reshape(upper, [-1])}


@pytest.mark.slow
def test_a_py_function_in_an_export_is_named_and_fails_in_the_c_runtime(runner, tmp_path):
    path = str(tmp_path / "pyfunc")
    model = PyFunctionModel()
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    bad = graph_check.unservable_ops(path)
    assert list(bad) == ["EagerPyFunc"], bad
    assert "EagerPyFunc (calls Python, in function " in graph_check.describe(bad)
    with pytest.raises(RuntimeError):
        c_runtime.run_signature(runner, path, "serving_default", {"articles": ["a b"]})


@pytest.mark.slow
def test_a_tensorflow_text_op_in_an_export_is_named_and_fails_to_load(runner, tmp_path):
    import tensorflow_text as tf_text

    class TextModel(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles")])
        def serve(self, articles):
            words = tf_text.regex_split(articles, r"\s+")
            return {"summaries": tf.strings.reduce_join(words, axis=-1, separator="_")}

    path = str(tmp_path / "text")
    model = TextModel()
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    bad = graph_check.unservable_ops(path)
    assert "RegexSplitWithOffsets" in bad and all(op not in graph_check.PYTHON_OPS for op in bad)
    assert "not a core op" in graph_check.describe(bad)
    with pytest.raises(RuntimeError, match="RegexSplitWithOffsets"):
        c_runtime.run_signature(runner, path, "serving_default", {"articles": ["a b"]})


@pytest.mark.slow
def test_the_command_prints_summaries(exported, capsys):
    _, _, path = exported
    assert c_runtime.main(["--saved_model", path, ARTICLE]) == 0
    score, summary = capsys.readouterr().out.strip().split("\t")
    assert float(score) < 0 and summary


def test_run_signature_refuses_inputs_the_signature_does_not_take(runner, exported):
    _, _, path = exported
    with pytest.raises(ValueError, match="takes \\['articles'\\]"):
        c_runtime.run_signature(runner, path, "serving_default", {"text": ["a"]})
    assert os.path.exists(runner)


@pytest.mark.slow
def test_an_export_with_a_py_function_is_refused_and_not_published(trained_model_dir, tmp_path,
                                                                   monkeypatch):
    """A signature that calls Python (as a careless change to the export might add) fails the
    export's own check, naming the op, and no version dir appears."""
    from pgn_tf.saved_model import export
    from pgn_tf.utils.errors import UserError

    plain = export.build_archive

    def with_py_function(summarizer, limits=None):
        archive = plain(summarizer, limits)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="articles")])
        def shout(articles):
            return {"summaries": tf.reshape(
                tf.py_function(lambda a: tf.strings.upper(a), [articles], tf.string), [-1])}

        archive.add_endpoint("shout", shout)
        return archive

    monkeypatch.setattr(export, "build_archive", with_py_function)
    with pytest.raises(UserError, match="EagerPyFunc \\(calls Python"):
        export.export(trained_model_dir, str(tmp_path), "pgn", version=1)
    assert os.listdir(tmp_path / "pgn") == []
