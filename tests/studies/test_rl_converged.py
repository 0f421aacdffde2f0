"""The converged-start RL study's pieces: the start curve's flatness, the grid's choice, the arms'
overrides (valid config keys of the preset), and the table's verdicts follow the tests."""

import argparse
import json
import os
import re

import pytest

from benchmarks.common import code_version
from pgn_tf import config as config_lib
from pgn_tf.metrics import significance
from studies import rl_converged as rc
from studies import targets

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


def _curve(values, minutes=None):
    minutes = minutes or [10 * i for i in range(len(values))]
    return [{"minutes": m, "step": 100 * i, "rougeLsum": v}
            for i, (m, v) in enumerate(zip(minutes, values))]


def test_flatness_measures_the_last_thirds_gain():
    rising = rc.flatness(_curve([30, 34, 37, 40, 42, 44, 46]))  # last third from minute 40
    assert rising["flat"] is False and rising["last_third_gain"] == pytest.approx(6.0)
    assert rising["slope_per_10_min"] == pytest.approx(2.0)
    plateau = rc.flatness(_curve([30, 40, 44, 45.2, 45.0, 45.1, 45.2]))
    assert plateau["flat"] is True and plateau["last_third_gain"] == pytest.approx(0.0)
    dip_then_back = rc.flatness(_curve([30, 40, 45, 44, 44.5, 45.2, 45.1]))
    assert dip_then_back["last_third_gain"] == pytest.approx(0.2) and dip_then_back["flat"]
    assert rc.flatness(_curve([30, 31]))["flat"] is None
    assert rc.flatness([{"minutes": 0, "step": 0, "loss": 3.0}] * 5)["flat"] is None


def test_grid_and_choice():
    points = rc.grid_points()
    assert len(points) == len(rc.GRID["learning_rate"]) * len(rc.GRID["gamma"])
    assert {"learning_rate": 1e-4, "gamma": 0.9984} in points  # the paper's setting is in it
    results = [{**p, "selection_rougeLsum": 40.0 + i % 3} for i, p in enumerate(points)]
    assert rc.best_point(results) is results[2]  # the first of the best
    with pytest.raises(ValueError, match="no grid point"):
        rc.best_point([])


@pytest.mark.parametrize("corpus", sorted(rc.CORPORA))
@pytest.mark.parametrize("arm", rc.ARMS)
def test_each_arms_overrides_are_the_presets_keys(arm, corpus):
    point = {"learning_rate": 3e-5, "gamma": 0.99}
    overrides = rc.arm_overrides(arm, point, 4)
    cfg = config_lib.resolve(rc.CORPORA[corpus]["preset"])
    config_lib.apply_overrides(cfg, overrides)
    cfg.validate()
    want = {"ML continued": "ml", "ML+RL (mixed)": "mixed", "RL alone": "rl"}[arm]
    assert cfg.train.objective == want
    if arm != "ML continued":
        assert cfg.train.rl_learning_rate == 3e-5 and cfg.train.rl_samples == 4
        assert cfg.train.eval_every == rc.RL_EVAL_EVERY
    if arm == "ML+RL (mixed)":
        assert cfg.train.rl_gamma == 0.99
    with pytest.raises(ValueError, match="unknown arm"):
        rc.arm_overrides("RL", point, 4)


def test_rouge_l_is_a_significance_metric(tmp_path):
    rows = [{"decoded": "a b c d", "reference": "a b x d"}, {"decoded": "e f", "reference": "e f"}]
    got = significance.per_example_rouge(rows, "rougeL")
    assert got.tolist() == pytest.approx([75.0, 100.0])


def test_render_follows_the_tests(tmp_path):
    ok = {"delta": 0.8, "delta_ci95": [0.1, 1.5], "p_value": targets.P_VALUE / 5}
    weak = {"delta": 0.8, "delta_ci95": [-0.2, 1.5], "p_value": 0.2}
    row = {"rouge1": 40.0, "rouge2": 20.0, "rougeLsum": 38.0, "dup_3gram_pct": 1.0,
           "novel_2gram_pct": 10.0, "repeat_word_outputs_pct": 5.0, "train_steps": 900}
    state = {"start": {**rc.flatness(_curve([30, 40, 44, 45.2, 45.0, 45.1, 45.2])), "curve": [],
                       "train": {"final_step": 800}},
             "grid": [{"learning_rate": 1e-4, "gamma": 0.9984, "selection_rougeLsum": 41.0,
                       "steps": 50}],
             "rows": {arm: dict(row, selected_step=step)
                      for arm, step in zip(rc.ARMS, (900, 800, None))},
             "tests": {"ML+RL (mixed) vs ML continued, rougeLsum": ok,
                       "RL alone vs ML continued, rougeL": weak}}
    md = rc.render(state, {"start_minutes": 60, "score": 1500, "select": 500})
    assert "gained 0.0 ROUGE-Lsum" in md and ": flat." in md
    lines = md.splitlines()
    assert next(x for x in lines if x.startswith("- ML+RL")).endswith("above at p < 0.05")
    assert next(x for x in lines if x.startswith("- RL alone")).endswith("not shown above")
    assert sum(x.startswith("| RL alone |") for x in lines) == 1
    assert next(x for x in lines if x.startswith("| ML continued |")).endswith("| 900 |")
    assert next(x for x in lines if x.startswith("| ML+RL")).endswith("| 800 (the start) |")
    # --render rewrites the table from rl.json without data or training
    (tmp_path / "rl.json").write_text(json.dumps({**state, "settings": {"score": 1500}}))
    assert rc.main(["--work_dir", str(tmp_path), "--render"]) == 0
    assert "above at p < 0.05" in (tmp_path / "rl_table.md").read_text()
    with pytest.raises(SystemExit, match="rl_samples"):
        rc.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path), "--rl_samples", "1"])
    assert isinstance(rc.build_parser(), argparse.ArgumentParser)


def test_the_record_names_the_code():
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?|unknown", code_version())
    md = rc.render({"code_versions": ["abc1234", "def5678+changes"]}, {})
    assert "code: abc1234, def5678+changes." in md


def test_a_stopped_run_resumes_without_redoing_a_phase(tmp_path, monkeypatch):
    """--stop_after ends a run after one phase; the next run reuses every finished phase and its
    scoring, and only the whole study computes the arms' tests. The training and the scoring
    are the quality table's (tested there); here they write what they would, and count."""
    import tensorflow as tf

    trained, scored = [], []

    def train_phase(self, model_dir, preset, minutes, extra=()):
        trained.append(os.path.basename(model_dir))
        step = 1000 + 100 * len(trained)
        os.makedirs(model_dir, exist_ok=True)
        with tf.summary.create_file_writer(os.path.join(model_dir, "eval")).as_default():
            for s, v in ((step - 100, 40.0), (step, 40.0 + len(trained))):
                tf.summary.scalar("rougeLsum", v, step=s)
                tf.summary.scalar("loss", 3.0, step=s)
        result = {"final_step": step, "wall_seconds": 60.0 * minutes}
        with open(os.path.join(model_dir, "train_result.json"), "w") as f:
            json.dump(result, f)
        return result

    def evaluate(self, name, stage, model_dir, extra=(), train=None, **info):
        scored.append(name)
        path = tmp_path / (name.replace(" ", "_") + ".jsonl")
        path.write_text("".join(json.dumps({"decoded": f"a b {i % 3}", "reference": "a b c"})
                                + "\n" for i in range(20)))
        return {"name": name, "rouge1": 1.0, "rouge2": 1.0, "rougeLsum": 1.0,
                "decoded": str(path), **info}

    monkeypatch.setattr(rc.Table, "train_phase", train_phase)
    monkeypatch.setattr(rc.Table, "evaluate", evaluate)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--grid_learning_rates", "1e-4",
            "--grid_gammas", "0.9984,0.99"]
    assert rc.main([*args, "--stop_after", "start"]) == 0
    assert trained == ["start"] and len(scored) == 1
    state = json.loads((work / "rl.json").read_text())
    assert "grid" not in state and state["start"]["row"]["name"] == scored[0]
    assert rc.main([*args, "--stop_after", "ml"]) == 0
    assert trained == ["start", "lr0.0001_g0.9984", "lr0.0001_g0.99", "ml"]
    assert scored == [scored[0], "paulus2017 converged start, ML continued"]
    state = json.loads((work / "rl.json").read_text())
    assert state["chosen"]["gamma"] == 0.99 and "tests" not in state  # the later point scored more
    assert rc.main(args) == 0
    assert trained[4:] == ["mixed", "rl"] and len(scored) == 4
    state = json.loads((work / "rl.json").read_text())
    assert set(state["rows"]) == set(rc.ARMS)
    # each RL arm against ML continued, every arm against the start; ROUGE-Lsum and ROUGE-L
    assert len(state["tests"]) == 2 * (2 + 3)
    assert "RL alone vs ML continued, rougeL" in state["tests"]
    assert "ML continued vs the start, rougeLsum" in state["tests"]
    assert len(state["code_versions"]) == 3
    assert "| RL alone |" in (work / "rl_table.md").read_text()


def _fake_phases(monkeypatch, tmp_path):
    """Training and scoring that write what the quality table's would, and list what ran."""
    import tensorflow as tf

    trained, scored = [], []

    def train_phase(self, model_dir, preset, minutes, extra=()):
        trained.append((os.path.basename(model_dir), list(extra)))
        step = 1000 + 100 * len(trained)
        os.makedirs(model_dir, exist_ok=True)
        with tf.summary.create_file_writer(os.path.join(model_dir, "eval")).as_default():
            tf.summary.scalar("rougeLsum", 40.0, step=step)
        result = {"final_step": step, "wall_seconds": 60.0 * minutes}
        with open(os.path.join(model_dir, "train_result.json"), "w") as f:
            json.dump(result, f)
        return result

    def evaluate(self, name, stage, model_dir, extra=(), train=None, **info):
        scored.append(name)
        path = tmp_path / (name.replace(" ", "_") + ".jsonl")
        path.write_text("".join(json.dumps({"decoded": f"a b {i % (2 + len(scored))}",
                                            "reference": "a b c"}) + "\n" for i in range(20)))
        return {"name": name, "rouge1": 1.0, "rouge2": 1.0, "rougeLsum": 1.0,
                "decoded": str(path), **info}

    monkeypatch.setattr(rc.Table, "train_phase", train_phase)
    monkeypatch.setattr(rc.Table, "evaluate", evaluate)
    return trained, scored


def test_a_given_point_and_some_arms_run_no_grid_and_test_against_the_start(tmp_path,
                                                                            monkeypatch):
    """--point LR,GAMMA (a grid run before) skips the grid; --arms rl runs RL alone only, at
    that learning rate, and tests it against the start (there is no ML continued to test it
    against); the table says the point was given."""
    trained, scored = _fake_phases(monkeypatch, tmp_path)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--point", "3e-4,0.99",
            "--arms", "rl"]
    assert rc.main(args) == 0
    assert [name for name, _ in trained] == ["start", "rl"]
    assert "train.rl_learning_rate=0.0003" in trained[1][1]
    assert "train.objective=rl" in trained[1][1]
    state = json.loads((work / "rl.json").read_text())
    assert state["chosen"] == {"learning_rate": 3e-4, "gamma": 0.99, "given": True}
    assert "grid" not in state and set(state["rows"]) == {"RL alone"}
    assert sorted(state["tests"]) == ["RL alone vs the start, rougeL",
                                      "RL alone vs the start, rougeLsum"]
    md = (work / "rl_table.md").read_text()
    assert "No grid: learning rate 0.0003 and gamma 0.99 given (--point)." in md
    assert "- RL alone vs the start, rougeL: delta" in md
    assert rc.main(args) == 0 and len(trained) == 2 and len(scored) == 2  # all reused


@pytest.mark.parametrize("flags,message", [
    (["--point", "3e-4"], "LEARNING_RATE,GAMMA"),
    (["--point", "0,0.99"], "learning rate > 0"),
    (["--point", "3e-4,1.5"], "gamma <= 1"),
    (["--arms", "rl", "--stop_after", "ml"], "names an arm --arms does not run"),
])
def test_a_bad_point_or_stop_is_refused_before_any_work(tmp_path, flags, message):
    with pytest.raises(SystemExit, match=message):
        rc.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path / "w"), *flags])
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("text", ["rl,RL", "", "ml,alone"])
def test_unknown_arms_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        rc.build_parser().parse_args(["--arms", text])
    assert "expected arms of ml,mixed,rl" in capsys.readouterr().err


def test_the_digests_study_has_its_preset_table_and_columns(tmp_path, monkeypatch):
    """--corpus digests trains digest_paulus, scores with the digests' table (600 scored, 400
    selecting, an 80-minute start by default), adds blocks matched and sentences repeated to the
    arms' table, and refuses a work dir that holds the other corpus's study."""
    from studies.digest_table import DigestTable

    seen = {}

    def run(self):
        seen.update(preset=self.preset, table=type(self.table), score=self.a.score,
                    select=self.a.select, start=self.a.start_minutes)

    monkeypatch.setattr(rc.Study, "run", run)
    work = tmp_path / "digests"
    assert rc.main(["--data_dir", str(tmp_path), "--work_dir", str(work),
                    "--corpus", "digests"]) == 0
    assert seen == {"preset": "digest_paulus", "table": DigestTable, "score": 600,
                    "select": 400, "start": 80.0}
    assert json.loads((work / "rl.json").read_text())["settings"]["corpus"] == "digests"
    assert "(digest_paulus)" in (work / "rl_table.md").read_text()
    with pytest.raises(SystemExit, match="holds a study of the digests"):
        rc.main(["--data_dir", str(tmp_path), "--work_dir", str(work)])
    # a study written before --corpus existed is the headlines'
    old = tmp_path / "old"
    old.mkdir()
    (old / "rl.json").write_text(json.dumps({"settings": {"score": 1500}}))
    with pytest.raises(SystemExit, match="holds a study of the descriptions"):
        rc.main(["--data_dir", str(tmp_path), "--work_dir", str(old), "--corpus", "digests"])

    row = {"rouge1": 40.0, "rouge2": 20.0, "rougeLsum": 38.0, "train_steps": 900,
           "block_match_pct": 41.5, "repeated_sentence_pct": 1.25}
    md = rc.render({"rows": {"RL alone": row}}, {"corpus": "digests"})
    header = next(x for x in md.splitlines() if x.startswith("| arm |"))
    assert "blocks matched %" in header and "sentences repeated %" in header
    line = next(x for x in md.splitlines() if x.startswith("| RL alone |"))
    assert "| 41.5 | 1.25 |" in line
    assert line.count("|") == header.count("|")
    headlines = rc.render({"rows": {"RL alone": {k: v for k, v in row.items()
                                                 if "block" not in k and "sentence" not in k}}},
                          {})
    assert "blocks matched" not in headlines and "(debian_paulus)" in headlines
