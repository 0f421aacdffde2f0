"""pgn_tf.metrics.rouge155: the papers' ROUGE-1.5.5 (Perl) on the strings rouge-score scores, and a clear
error where it cannot run."""

import pytest

from pgn_tf.metrics import rouge155
from pgn_tf.metrics.scoring import rouge

DECODED = ["the cat sat on the mat .\nit was happy .", "dogs bark at night .", ""]
REFERENCES = ["a cat sat on a mat .\nthe cat was happy .", "the dogs barked all night .",
              "nothing was said ."]


def test_rouge155_agrees_with_rouge_score_on_plain_text():
    ours = rouge(DECODED, REFERENCES, bootstrap=0)
    perl = rouge155.score(DECODED, REFERENCES, bootstrap=1000)
    # the same stemmer family and the same sentence-level LCS: equal on text this plain
    assert perl["rouge1"] == pytest.approx(ours["rouge1"], abs=0.5)
    assert perl["rouge2"] == pytest.approx(ours["rouge2"], abs=0.5)
    assert perl["rougeL"] == pytest.approx(ours["rougeLsum"], abs=0.5)
    assert perl["rouge1_ci95"][0] <= perl["rouge1"] <= perl["rouge1_ci95"][1]
    assert 0 < perl["rouge2"] < perl["rouge1"] < 100


def test_rouge155_refuses_unequal_lists():
    with pytest.raises(ValueError, match="2 summaries for 3 references"):
        rouge155.score(DECODED[:2], REFERENCES)


def test_rouge155_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(rouge155.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="perl is not installed"):
        rouge155.score(DECODED, REFERENCES)
