"""The identical-summary share and the ROUGE deltas between two decoded files."""

import json

import pytest

from research.studies.same_outputs import same_outputs


def test_identical_share_and_deltas(tmp_path):
    refs = ["puzzle game for text mode", "plugin for claws mail", "card game", "mail reader"]
    a = [{"decoded": r, "reference": r} for r in refs]
    b = [dict(r) for r in a]
    b[2]["decoded"] = "zebra"
    for name, rows in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = same_outputs(str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), samples=200)
    assert out["examples"] == 4 and out["identical_pct"] == 75.0
    assert out["rouge1"]["a"] == 100.0 and out["rouge1"]["delta"] == -25.0
    assert out["first_difference"] == {"index": 2, "a": "card game", "b": "zebra"}
    (tmp_path / "c.jsonl").write_text(json.dumps({"decoded": "x", "reference": "y"}) + "\n")
    with pytest.raises(ValueError, match="same examples"):
        same_outputs(str(tmp_path / "a.jsonl"), str(tmp_path / "c.jsonl"))
