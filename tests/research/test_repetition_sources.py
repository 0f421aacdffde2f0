"""research/studies/repetition_sources.py: counts checked by hand on small outputs."""

import json

import pytest

from research.studies import repetition_sources as rs

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


def _rows():
    return [
        # 7 3-grams, 3 distinct (a b c, b c a, c a b): 4 duplicates
        {"decoded": "a b c a b c a b c", "reference": "x y z"},
        {"decoded": "p q r s", "reference": "x y z x y z"},  # none; the reference has 1 dup
        {"decoded": ": : : : :", "reference": "u v w"},  # ": : :" x3 -> 2 dups
    ]


def test_duplicates_counts_k_minus_one_for_an_ngram_seen_k_times():
    grams, dups, by_gram = rs.duplicates("a b c a b c a b c".split(), 3)
    assert (grams, dups) == (7, 4)
    assert by_gram == {("a", "b", "c"): 2, ("b", "c", "a"): 1, ("c", "a", "b"): 1}


def test_report_tells_the_worst_output_from_the_rest():
    r = rs.report(_rows(), n=3, top=2)
    assert r["outputs"] == 3 and r["duplicates"] == 6 and r["outputs_with_duplicates"] == 2
    assert r["dup_pct"] == pytest.approx(round(100 * 6 / (7 + 2 + 3), 2))
    assert r["reference_dup_pct"] == pytest.approx(round(100 * 1 / (1 + 4 + 1), 2))
    assert r["worst_output_duplicates"] == 4 and r["worst_output"] == "a b c a b c a b c"
    assert r["dup_pct_without_worst"] == pytest.approx(round(100 * 2 / (2 + 3), 2))
    assert r["worst_10_share_pct"] == 100.0
    assert r["top_ngrams"] == [["a b c", 2], [": : :", 2]]


def test_no_duplicates_leaves_the_rate_unchanged_without_a_worst_output():
    r = rs.report([{"decoded": "a b c d", "reference": "a b c"}], n=2)
    assert r["duplicates"] == 0 and r["worst_output"] == ""
    assert r["dup_pct"] == r["dup_pct_without_worst"] == 0.0


def test_main_reads_decoded_files_and_prints_a_json_line(tmp_path, capsys):
    path = tmp_path / "decoded.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    rs.main([str(path), "--n", "3"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    payload = json.loads(line[line.index("{"):])
    assert payload["files"][str(path)]["worst_output_duplicates"] == 4
