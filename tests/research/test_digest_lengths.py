"""Which blocks a digest's summary leaves out, by place, and the paired sentence counts."""

import json

import pytest

from research.studies.digest_lengths import block_positions, compare

REF = "puzzle game for text mode .\nplugin for claws mail .\nfree card game ."


def _rows(*decoded):
    return [{"decoded": d, "reference": REF} for d in decoded]


def test_an_early_stop_leaves_out_the_last_block():
    out = block_positions(_rows("puzzle game for text mode . plugin for claws mail ."))
    assert out["digests"] == 1 and out["sentences_mean"] == 2 and out["shorter_pct"] == 100.0
    assert out["reference_sentences_mean"] == 3
    assert out["matched_pct_by_position"] == {"first": 100.0, "middle": 100.0, "last": 0.0}
    assert out["last_unmatched_share"] == 1.0 and out["short_last_left_out_share"] == 1.0
    assert out["uniform_last_share"] == pytest.approx(1 / 3, abs=1e-3)


def test_a_skipped_middle_block_is_not_an_early_stop():
    out = block_positions(_rows("puzzle game for text mode . free card game ."))
    assert out["matched_pct_by_position"] == {"first": 100.0, "middle": 0.0, "last": 100.0}
    assert out["last_unmatched_share"] == 0.0 and out["short_last_left_out_share"] == 0.0


def test_a_full_summary_is_not_shorter():
    out = block_positions(_rows(REF.replace("\n", " ")))
    assert out["shorter_pct"] == 0.0 and out["sentences_mean"] == 3
    assert out["matched_pct_by_position"] == {"first": 100.0, "middle": 100.0, "last": 100.0}


def test_sentence_counts_are_paired_against_the_first_file(tmp_path):
    short = _rows("puzzle game for text mode .", "plugin for claws mail . free card game .")
    long = _rows(REF.replace("\n", " "), REF.replace("\n", " "))
    for name, rows in (("a", short), ("b", long)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    out = compare([a, b], samples=200)
    assert out[a]["sentences_mean"] == 1.5 and out[b]["sentences_mean"] == 3
    assert out[b]["sentences_vs_first"]["delta"] == 1.5
    assert out[b]["sentences_vs_first"]["p_not_longer"] < 0.01
    (tmp_path / "c.jsonl").write_text(json.dumps({"decoded": "x", "reference": "y"}) + "\n")
    with pytest.raises(ValueError, match="same examples"):
        compare([a, str(tmp_path / "c.jsonl")])
