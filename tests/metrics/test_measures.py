"""The measures RL is not trained on, and their paired tests: content-word repeats, novel
words, fluency (beside ROUGE-2), each pinned by hand and read back from decoded files."""

import gzip
import json
import math

import numpy as np
import pytest

from pgn_tf import significance as significance_cli
from pgn_tf.inference import evaluator
from pgn_tf.metrics import scoring, significance
from pgn_tf.text import is_content_word
from pgn_tf.utils.errors import UserError


def test_content_words_leave_function_words_and_punctuation_out():
    assert is_content_word("game") and is_content_word("2048") and is_content_word("Game")
    assert not any(is_content_word(t) for t in ("for", "The", "of", ",", "--", "'s"))
    assert scoring.repeats_content_word("2048 game game".split())
    assert scoring.repeats_content_word("plugin Plugin for claws mail".split())
    assert not scoring.repeats_content_word("library for x and for y".split())
    assert not scoring.repeats_content_word("a , b , c".split())


def test_novel_words_count_output_words_absent_from_the_article():
    assert scoring.novel_words("a game for mail .".split(), "the game reads mail".split()) == (
        2, 4)  # "a" and "for" are novel; "." is not a word
    stats = scoring.repetition_and_novelty(
        [["game", "game", "x"], ["mail", "."]], [["game"], ["mail", "y"]])
    assert stats["repeat_content_word_outputs_pct"] == 50.0
    assert stats["novel_word_pct"] == 25.0 and stats["novel_word_outputs_pct"] == 50.0


def test_mcnemar_by_hand():
    a = np.array([1, 0, 0, 0, 1, 0, 0, 0], bool)
    b = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)  # B only on 3 pairs, A only on 1
    out = significance.mcnemar(a, b)
    assert (out["b_only"], out["a_only"]) == (3, 1)
    assert out["p_value"] == pytest.approx(5 / 16)  # P(X >= 3), X ~ Bin(4, 1/2)
    assert out["p_value_below"] == pytest.approx(15 / 16)  # P(X >= 1)
    assert out["share_a"] == 25.0 and out["share_b"] == 50.0 and out["delta"] == 25.0
    assert significance.mcnemar(a, a)["p_value"] == 1.0
    with pytest.raises(UserError):
        significance.mcnemar(a, b[:3])


def _write(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def test_compare_each_measure_from_decoded_files(tmp_path, capsys):
    train = tmp_path / "train.jsonl"
    summaries = ["puzzle game for text mode", "plugin for claws mail", "card game for kids",
                 "mail reader for text mode"] * 10
    train.write_text("".join(json.dumps({"id": f"t{i}", "article": "x", "summary": s}) + "\n"
                             for i, s in enumerate(summaries)))
    val = tmp_path / "val.jsonl"
    articles = {f"v{i}": f"a {w} game for text mode and mail" for i, w in enumerate("pqrstuvwxyz")}
    val.write_text("".join(json.dumps({"id": k, "article": v, "summary": "game for text mode"})
                           + "\n" for k, v in articles.items()))
    clean = [{"id": k, "decoded": "game for text mode", "reference": "game for text mode"}
             for k in articles]
    messy = [{**r, "decoded": "game game for text mode zebra"} for r in clean]
    a, b = _write(tmp_path / "a.jsonl.gz", clean), _write(tmp_path / "b.jsonl.gz", messy)

    rep = significance.compare(a, b, "repeat_content_word")
    assert rep["share_b"] == 100.0 and rep["b_only"] == 11 and rep["p_value"] < 0.001
    assert rep["higher_is_better"] is False
    novel = significance.compare_with_data(a, b, "novel_words", 500, data=str(val))
    assert novel["mean_a"] == 0.0 and novel["mean_b"] == pytest.approx(100 / 6, abs=1e-3)
    fluent = significance.compare_with_data(a, b, "fluency", 500, fluency_data=str(train))
    assert fluent["mean_b"] > fluent["mean_a"] and fluent["p_value"] < 0.01
    assert significance.compare(a, b, "rouge2", 500)["p_value"] > 0.99  # B's extra words cost
    with pytest.raises(UserError, match="articles"):
        significance.compare(a, b, "novel_words")
    with pytest.raises(UserError, match="fluency model"):
        significance.compare(a, b, "fluency")
    assert significance_cli.main([a, b, "--metric", "novel_words", "--data", str(val),
                                  "--samples", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["metric"] == "novel_words"


def test_the_evaluator_reports_fluency_with_each_rows_score(corpus, tmp_path):
    """A baseline scored with the training split's fluency model: the outputs' perplexity,
    the references' own, and each row's score, which a paired test reads back."""
    result = evaluator.evaluate(evaluator.BaselineSource("lead", lead_words=8),
                                corpus["validation"], limit=20, bootstrap=0,
                                fluency_data=corpus["train"], output_dir=str(tmp_path))
    m = result.metrics
    assert m["fluency_ppl"] > 1 and m["reference_fluency_ppl"] > 1
    assert "repeat_content_word_outputs_pct" in m and "novel_word_pct" in m
    nll = sum(r["fluency_nll"] for r in result.rows)
    n = sum(r["fluency_tokens"] for r in result.rows)
    assert m["fluency_ppl"] == pytest.approx(math.exp(nll / n), rel=1e-4)
    path = str(tmp_path / "decoded.jsonl")
    same = significance.compare(path, path, "fluency", 200)  # the rows' own scores
    assert same["delta"] == 0.0 and same["mean_a"] == pytest.approx(nll / n, rel=0.2)
    without = evaluator.evaluate(evaluator.BaselineSource("lead", lead_words=8),
                                 corpus["validation"], limit=20, bootstrap=0).metrics
    assert "fluency_ppl" not in without
