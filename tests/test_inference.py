"""Decoding a trained model: copying, bad input, evaluate and summarize CLIs."""

import json

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf import evaluate, summarize
from pgn_tf.data import tfrecord
from pgn_tf.errors import UserError
from pgn_tf.inference import Summarizer
from pgn_tf.model_dir import ModelDir


@pytest.fixture(scope="module")
def summarizer(trained_model_dir):
    return Summarizer.from_model_dir(trained_model_dir)


@pytest.fixture(scope="module")
def validation(corpus):
    return list(tfrecord.read_tfrecords(corpus["validation"]))[:16]


def test_copies_oov_words_it_can_only_have_copied(summarizer, validation):
    out = summarizer.summarize(tf.constant([e.article for e in validation]))
    vocab = set(summarizer.vocab.words)
    copied = 0
    for ex, toks, n in zip(validation, out["tokens"].numpy(), out["length"].numpy()):
        words = [t.decode() for t in toks[:n]]
        oov = [w for w in words if w not in vocab]
        assert all(w in ex.article.lower() for w in oov)  # every OOV comes from its own article
        copied += len(oov)
    assert copied >= len(validation)  # names and numbers really are copied


def test_beam_one_equals_greedy_on_the_real_model(summarizer, validation):
    arts = tf.constant([e.article for e in validation[:6]])
    beam = summarizer.summarize(arts, beam_size=1)
    greedy = summarizer.summarize(arts, method="greedy")
    np.testing.assert_array_equal(beam["tokens"].numpy(), greedy["tokens"].numpy())


def test_bad_articles_get_a_summary_each(summarizer):
    articles = ["", "   \n\t ", "word " * 100_000, b"caf\xc3\xa9 \xff\xfe\xfd broken".decode(
        "latin-1").encode("latin-1"), "ok article ."]
    arts = tf.constant([a if isinstance(a, bytes) else a.encode() for a in articles])
    out = summarizer.summarize(arts, verbose=True)
    assert out["summaries"].shape == (5,)
    for s in out["summaries"].numpy():
        s.decode("utf-8")  # valid UTF-8 even for broken input
    assert np.all(np.isfinite(out["scores"].numpy()))


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        ModelDir(str(tmp_path / "nope")).find_checkpoint()
    with pytest.raises(UserError, match="has no checkpoint"):
        ModelDir(str(tmp_path)).find_checkpoint()
    with pytest.raises(UserError, match="ckpt-9 does not exist"):
        ModelDir(str(tmp_path)).find_checkpoint(str(tmp_path / "ckpt" / "ckpt-9"))


def test_evaluate_model_and_lead(trained_model_dir, corpus, tmp_path):
    args = evaluate.build_parser().parse_args(
        ["--model_dir", trained_model_dir, "--data", corpus["validation"], "--limit", "24",
         "--output_dir", str(tmp_path), "--bootstrap", "100", "--quiet"])
    m = evaluate.evaluate(args)
    assert m["examples"] == 24 and m["rouge1"] > 50
    assert m["rouge1_ci95"][0] <= m["rouge1"] <= m["rouge1_ci95"][1]
    assert 0 < m["mean_p_gen"] < 1 and m["articles_per_sec"] > 0
    lines = [json.loads(x) for x in open(tmp_path / "decoded.jsonl")]
    assert len(lines) == 24 and lines[0]["reference"]
    lead = evaluate.evaluate(evaluate.build_parser().parse_args(
        ["--baseline", "lead", "--lead_words", "8", "--data", corpus["validation"],
         "--limit", "24", "--bootstrap", "100"]))
    assert lead["system"] == "lead8w" and lead["avg_summary_tokens"] == 8


def test_repetition_and_novelty_stats():
    stats = evaluate.repetition_and_novelty([["a", "b", "a", "b", "."]], [["a", "b", "c"]])
    assert stats["dup_1gram_pct"] == 40.0 and stats["dup_2gram_pct"] == 25.0
    assert stats["novel_1gram_pct"] == 20.0 and stats["repeat_token_outputs_pct"] == 100.0


def test_summarize_cli_with_explain(trained_model_dir, summarizer, validation, tmp_path, capsys):
    html = tmp_path / "a.html"
    args = summarize.build_parser().parse_args(
        ["--model_dir", trained_model_dir, validation[0].article, "--explain", str(html)])
    summary = summarize.summarize(args)
    want = summarizer.summarize(tf.constant([validation[0].article]))
    assert summary == want["summaries"].numpy()[0].decode() and summary in capsys.readouterr().out
    page = html.read_text()
    n = int(want["length"][0])
    assert n >= 3 and "p_gen" in page and page.count("<tr><td><b>") == n  # a row per word
    png = tmp_path / "a.png"
    args = summarize.build_parser().parse_args(
        ["--model_dir", trained_model_dir, validation[0].article, "--explain", str(png)])
    summarize.summarize(args)
    assert png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert summarize.main(["--model_dir", str(tmp_path / "none"), "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pgn_tf.summarize: error: model dir {tmp_path / 'none'} does not exist"]
    assert not (tmp_path / "none").exists()  # reading a model dir never creates one
