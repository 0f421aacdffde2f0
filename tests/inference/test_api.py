"""The keras-hub-style API: `pgn_tf.Summarizer` called on lists (compiled once per batch-size
bucket), `explain`, the SavedModel form, and the package's lazy top-level names."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import pgn_tf
from pgn_tf.data import tfrecord
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.api import article_tokens
from pgn_tf.inference.batching import batch_buckets
from pgn_tf.inference.saved_model import SavedModelSummarizer
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.utils.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def summarizer(trained_model_dir):
    return Summarizer.from_model_dir(trained_model_dir)


@pytest.fixture(scope="module")
def articles(corpus):
    return [e.article for e in tfrecord.read_tfrecords(corpus["validation"])][:40]


def test_buckets():
    assert batch_buckets(32) == [1, 2, 4, 8, 16, 32]
    assert batch_buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_buckets(1) == [1]


@pytest.mark.slow
def test_call_traces_once_per_bucket_and_pads_invisibly(summarizer, articles):
    assert summarizer.batch_size == 32
    five = summarizer(articles[:5])  # bucket 8
    count = summarizer.compiled.tracing_count()
    assert count == 1
    assert summarizer(articles[:5]) == five
    assert summarizer(articles[10:13]) and summarizer(articles[20:28])  # 3 and 8 rows: bucket 8
    assert summarizer.compiled.tracing_count() == 1
    all40 = summarizer(articles)  # 32 + 8 rows
    assert summarizer.compiled.tracing_count() == 2
    assert summarizer(articles[::-1]) == all40[::-1]  # answered in input order
    assert summarizer.compiled.tracing_count() == 2
    # The padding rows change nothing: the plain in-graph call on the unpadded batch agrees.
    plain = summarizer.summarize(tf.constant(articles[:5]))["summaries"].numpy()
    assert five == [s.decode("utf-8") for s in plain]
    assert all40[:5] == five
    assert summarizer(articles[0]) == five[0]  # one str in, one str out
    with pytest.raises(TypeError, match="article 1 is a bytes"):
        summarizer(["ok", b"bytes"])


def test_explain(summarizer, articles):
    ex = summarizer.explain(articles[0])
    t, n = len(ex["tokens"]), len(ex["source_tokens"])
    assert ex["summary"] == summarizer(articles[0])
    assert ex["source_tokens"] == article_tokens([articles[0]], summarizer.cfg.data)[0]
    assert ex["source_tokens"][:4] == articles[0].lower().split()[:4]
    assert ex["attention"].shape == (t, n) and ex["p_gen"].shape == (t,)
    np.testing.assert_allclose(ex["attention"].sum(axis=1), 1.0, atol=1e-4)
    assert np.all((ex["p_gen"] > 0) & (ex["p_gen"] < 1))
    # A copied word (not in the vocabulary) is attended where it stands in the article.
    vocab = set(summarizer.vocab.words)
    copied = [i for i, w in enumerate(ex["tokens"]) if w not in vocab]
    assert copied
    for i in copied:
        assert ex["source_tokens"][int(np.argmax(ex["attention"][i]))] == ex["tokens"][i]


@pytest.mark.slow
def test_saved_model_summarizer_matches_in_process(summarizer, articles, exported):
    _, _, path = exported
    served = pgn_tf.Summarizer.from_saved_model(path)
    assert isinstance(served, SavedModelSummarizer) and served.batch_size == 32
    assert served(articles[:6]) == summarizer(articles[:6])
    a, b = served.explain(articles[1]), summarizer.explain(articles[1])
    assert a["tokens"] == b["tokens"] and a["source_tokens"] == b["source_tokens"]
    np.testing.assert_allclose(a["attention"], b["attention"], atol=1e-5)
    np.testing.assert_allclose(a["p_gen"], b["p_gen"], atol=1e-5)
    with pytest.raises(UserError, match="is it a pgn_tf export"):
        pgn_tf.Summarizer.from_saved_model(os.path.dirname(path))


@pytest.mark.slow
def test_one_decode_path_for_an_export_and_the_model(summarizer, articles, exported, corpus,
                                                     trained_model_dir):
    from pgn_tf.inference import evaluator

    _, _, path = exported
    served = pgn_tf.Summarizer.from_saved_model(path)
    both = DecodeRequest(tokens=True, p_gen=True)
    got = served.decode(articles[:8], 4, request=both)  # summarize_verbose
    want = summarizer.decode(articles[:8], 4, request=both)
    assert [r["tokens"] for r in got] == [r["tokens"] for r in want]
    assert [r["raw_tokens"] for r in got] == [r["raw_tokens"] for r in want]
    np.testing.assert_allclose([r["p_gen"] for r in got], [r["p_gen"] for r in want], atol=1e-5)
    # beam_size through summarize_options, as in process
    one, one_in_process = (s.decode(articles[:8], request=DecodeRequest(beam_size=1))
                           for s in (served, summarizer))
    assert [r["summary"] for r in one] == [r["summary"] for r in one_in_process]
    np.testing.assert_allclose([r["score"] for r in one], [r["score"] for r in one_in_process],
                               atol=1e-4)
    with pytest.raises(UserError, match="leave beam_size out"):
        served.decode(articles[:2], request=DecodeRequest(beam_size=2, tokens=True))
    # evaluate() scores an export as it scores the model it came from (no perplexity)
    kw = {"limit": 12, "bootstrap": 0, "progress": False}
    by_export = evaluator.evaluate(evaluator.ExportSource(path), corpus["validation"],
                                   **kw).metrics
    by_model = evaluator.evaluate(evaluator.ModelDirSource(trained_model_dir),
                                  corpus["validation"], **kw).metrics
    assert "perplexity" not in by_export and "perplexity" in by_model
    for key in ("rouge1", "rougeLsum", "dup_1gram_pct", "raw_unk_outputs_pct", "mean_p_gen"):
        assert by_export[key] == pytest.approx(by_model[key], abs=1e-3), key


def test_top_level_names_are_lazy():
    code = ("import sys, pgn_tf; assert 'tensorflow' not in sys.modules, 'tf imported'; "
            "assert pgn_tf.config.resolve('tiny').model.hidden_dim == 64; "
            "assert {'Summarizer', 'config', 'PointerGenerator'} <= set(dir(pgn_tf)); "
            "assert 'tensorflow' not in sys.modules, 'tf imported by config'")
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    from pgn_tf.models.pointer_generator import PointerGenerator

    assert pgn_tf.Summarizer is Summarizer and pgn_tf.PointerGenerator is PointerGenerator
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pgn_tf.nope  # noqa: B018
