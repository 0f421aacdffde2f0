"""The measures table recomputes every measure from kept outputs and tests each comparison."""

import gzip
import json

import pytest

from research.studies import measures_table


def _gz(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_measures_of_kept_outputs(tmp_path):
    data, results = tmp_path / "data", tmp_path / "results"
    data.mkdir()
    results.mkdir()
    refs = ["puzzle game for text mode", "plugin for claws mail", "card game for kids"] * 10
    _gz(data / "train.jsonl.gz", [{"id": f"t{i}", "article": "x", "summary": s}
                                  for i, s in enumerate(refs)])
    val = [{"id": f"v{i}", "article": f"puzzle game for text mode {i}",
            "summary": "puzzle game for text mode"} for i in range(8)]
    _gz(data / "validation.jsonl.gz", val)
    rows = [{"id": v["id"], "decoded": "puzzle game for text mode",
             "reference": "puzzle game for text mode"} for v in val]
    rows[3]["reference"] = "puzzle game game for text mode"  # a reference repeating a word
    _gz(results / "decoded_control.jsonl.gz", rows)
    mixed = [{**r, "decoded": "puzzle game game for text mode"} if i < 4 else r
             for i, r in enumerate(rows)]
    _gz(results / "decoded_mixed.jsonl.gz", mixed)

    table = measures_table.measures_table(str(results), str(data), ("mixed:control",), 500)
    control, arm = table["arms"]["control"], table["arms"]["mixed"]
    assert 95 < control["rouge1"] < 100 and control["repeat_content_word"] == 0.0
    assert arm["repeat_content_word"] == 50.0 and arm["novel_words"] == 0.0
    assert arm["fluency"] > control["fluency"] > 1
    # "game" is once in each article: no repeat is the article's. Three references have it
    # once, where cutting the repeat raises ROUGE-L; the fourth repeats it, where the reward
    # pays for the repeat
    assert arm["repeats_the_article_repeats_pct"] == 0.0
    assert arm["repeats_the_reward_pays_pct"] == 25.0
    test = table["tests"]["mixed:control"]
    assert test["repeat_content_word"]["b_only"] == 4
    assert test["repeat_content_word"]["p_value"] == pytest.approx(1 / 16)
    assert test["rouge1"]["delta"] < 0 and test["fluency"]["p_value"] < 0.05
    assert table["references"]["repeat_content_word"] == 12.5  # 1 of 8
    text = measures_table.render(table)
    assert "| ML+RL (mixed) vs ML control |" in text and "+50.00 (p 0.0625)" in text
    # an arm of another study, scored on the same pairs, joins by --arm NAME=PATH
    other = tmp_path / "other.jsonl.gz"
    _gz(other, mixed)
    again = measures_table.measures_table(str(results), str(data), ("elsewhere:control",), 500,
                                          extra={"elsewhere": str(other)})
    assert again["arms"]["elsewhere"] == table["arms"]["mixed"]
    with pytest.raises(KeyError, match="arms present"):
        measures_table.measures_table(str(results), str(data), ("rl:control",), 100)
