"""benchmarks.ab_rounds: the order it runs the two checkouts in, and what it reads of a run."""

import json

import pytest

from benchmarks import ab_rounds
from pgn_tf.utils.errors import UserError

pytestmark = pytest.mark.study  # the speed tools, apart from the product (pyproject.toml)


def test_rounds_alternate_abba_and_take_median_ratios(monkeypatch):
    seen = []
    speed = {"before": iter([100.0, 100.0, 100.0]), "after": iter([110.0, 90.0, 120.0])}

    def run_once(checkout, args, work_dir):
        seen.append(checkout)
        return {"training source tokens/s": next(speed[checkout]),
                "decoding articles/s": 10.0}

    monkeypatch.setattr(ab_rounds, "run_once", run_once)
    got = ab_rounds.rounds("before", "after", 3, [], "w")
    assert seen == ["before", "after", "after", "before", "before", "after"]
    assert [r["ratio"]["training source tokens/s"] for r in got["rounds"]] == [1.1, 0.9, 1.2]
    assert got["median_ratio"] == {"training source tokens/s": 1.1, "decoding articles/s": 1.0}


def test_after_set_reaches_the_after_side_only(monkeypatch):
    seen = []

    def run_once(checkout, args, work_dir):
        seen.append((checkout, args))
        return {"decoding articles/s": 10.0}

    monkeypatch.setattr(ab_rounds, "run_once", run_once)
    ab_rounds.rounds("same", "same", 2, ["--data_dir", "d"], "w", ["decode.jit_step=true"])
    on = ["--data_dir", "d", "--set", "decode.jit_step=true"]
    assert [a for _, a in seen] == [["--data_dir", "d"], on, on, ["--data_dir", "d"]]


def test_figures_are_read_from_compare_peers_json_line():
    line = json.dumps({"benchmark": "compare_peer", "pgn_tf": {
        "training": {"src_tokens_per_sec": 5803.4}, "decoding": {"articles_per_sec": 27.88}}})
    assert ab_rounds.figures_of(f"== table\n{line}\ncpu_flags: avx2\n") == {
        "training source tokens/s": 5803.4, "decoding articles/s": 27.88}
    with pytest.raises(UserError, match="no result line"):
        ab_rounds.figures_of("Traceback ...\nboom")


def test_a_directory_that_is_no_checkout_is_refused(tmp_path, capsys):
    assert ab_rounds.main(["--before", str(tmp_path), "--after", str(tmp_path), "--",
                           "--data_dir", "x"]) == 2
    assert "is not a checkout of this project" in capsys.readouterr().err
