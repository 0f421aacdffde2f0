"""The paired bootstrap: detects a real gain, not a null one, on the same examples."""

import json

import numpy as np
import pytest

from pgn_tf.metrics import significance
from pgn_tf.utils.errors import UserError


def test_paired_bootstrap_detects_a_gain_and_not_noise():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 100, 500)
    gain = significance.paired_bootstrap(a, a + rng.normal(2.0, 5.0, 500), samples=2000)
    assert gain["p_value"] < 0.01 and gain["delta_ci95"][0] > 0
    null = significance.paired_bootstrap(a, a + rng.normal(0.0, 5.0, 500), samples=2000)
    assert null["p_value"] > 0.05 and null["delta_ci95"][0] < 0 < null["delta_ci95"][1]
    worse = significance.paired_bootstrap(a, a - 1.0, samples=2000)
    assert worse["p_value"] > 0.99
    with pytest.raises(UserError):
        significance.paired_bootstrap(a, a[:10])


def test_compare_decoded_files(tmp_path):
    refs = ["the cat sat on the mat", "a dog ran in the park", "birds sing at dawn"]
    good = [{"decoded": r, "reference": r} for r in refs]
    bad = [{"decoded": "zebra", "reference": r} for r in refs]
    for name, rows in (("a", bad), ("b", good)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = significance.compare(str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"),
                               samples=500)
    assert out["mean_b"] == 100.0 and out["mean_a"] == 0.0 and out["p_value"] < 0.01
    (tmp_path / "c.jsonl").write_text(json.dumps({"decoded": "x", "reference": "other"}) + "\n")
    with pytest.raises(UserError, match="same examples"):
        significance.compare(str(tmp_path / "a.jsonl"), str(tmp_path / "c.jsonl"))


def test_reads_gzipped_decoded_files(tmp_path):
    """benchmarks/results keeps decoded outputs gzipped: they compare as the plain files do."""
    import gzip

    rows = [{"decoded": "a cat", "reference": "the cat sat"}, {"decoded": "x", "reference": "y"}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "a.jsonl").write_text(text)
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(text)
    assert significance.read_decoded(str(tmp_path / "b.jsonl.gz")) == rows
    out = significance.compare(str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl.gz"),
                               samples=200)
    assert out["delta"] == 0.0 and out["examples"] == 2
