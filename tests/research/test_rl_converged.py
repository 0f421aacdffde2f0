"""The converged-start RL study's pieces: the start curve's flatness, the grid's choice, the arms'
overrides (valid config keys of the preset), and the table's verdicts follow the tests."""

import argparse
import json
import os
import re

import pytest

from pgn_tf import config as config_lib
from pgn_tf import model_dir as model_dir_lib
from pgn_tf.metrics import significance
from research.common import code_version
from research.studies import measures_table, rl_arms, targets
from research.studies import rl_converged as rc

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
    points = rl_arms.grid_points()
    assert len(points) == len(rl_arms.GRID["learning_rate"]) * len(rl_arms.GRID["gamma"])
    assert {"learning_rate": 1e-4, "gamma": 0.9984} in points  # the paper's setting is in it
    results = [{**p, "selection_rougeLsum": 40.0 + i % 3} for i, p in enumerate(points)]
    assert rl_arms.best_point(results) is results[2]  # the first of the best
    with pytest.raises(ValueError, match="no grid point"):
        rl_arms.best_point([])


@pytest.mark.parametrize("corpus", sorted(rc.CORPORA))
@pytest.mark.parametrize("arm", rl_arms.ARMS)
def test_each_arms_overrides_are_the_presets_keys(arm, corpus):
    point = {"learning_rate": 3e-5, "gamma": 0.99}
    overrides = rl_arms.arm_overrides(arm, point, 4, control_rate=6e-4, second_seed=77,
                                      control_eval_every=rc.CORPORA[corpus]["control_eval_every"])
    start = config_lib.resolve(rc.CORPORA[corpus]["preset"])
    cfg = config_lib.resolve(rc.CORPORA[corpus]["preset"])
    config_lib.apply_overrides(cfg, overrides)
    cfg.validate()
    base = arm.removesuffix(", seed 2")
    want = {"ML continued": "ml", "ML+RL (mixed)": "mixed", "RL alone": "rl",
            "ML control": "ml"}[base]
    assert cfg.train.objective == want
    assert cfg.train.seed == (77 if arm.endswith("seed 2") else start.train.seed)
    # every arm but ML continued is a new phase: the start's best checkpoint, a fresh optimizer
    assert model_dir_lib.phase_change(start, cfg, "d") == (arm != "ML continued")
    if base in ("ML+RL (mixed)", "RL alone"):
        assert cfg.train.rl_learning_rate == 3e-5 and cfg.train.rl_samples == 4
        assert cfg.train.eval_every == rl_arms.RL_EVAL_EVERY
    if base == "ML+RL (mixed)":
        assert cfg.train.rl_gamma == 0.99
    if base == "ML control":
        assert cfg.train.learning_rate == 6e-4 and cfg.train.phase_name == "control"
        # as many evaluations a minute as the RL arms: ML steps are 3-5x as fast as mixed ones
        assert cfg.train.eval_every == rc.CORPORA[corpus]["control_eval_every"]
        assert 3 * rl_arms.RL_EVAL_EVERY <= cfg.train.eval_every <= 5 * rl_arms.RL_EVAL_EVERY
        with pytest.raises(ValueError, match="control grid"):
            rl_arms.arm_overrides(arm, point, 4)
    if base == "ML continued":
        assert cfg.train.eval_every == start.train.eval_every  # the preset's, a plain resume
    with pytest.raises(ValueError, match="unknown arm"):
        rl_arms.arm_overrides("RL", point, 4)


def test_the_control_grid_has_the_rl_grids_budget():
    assert len(rl_arms.CONTROL_GRID) == len(rl_arms.grid_points())
    assert 1e-3 in rl_arms.CONTROL_GRID  # the presets' ML rate
    assert set(rl_arms.GRID["learning_rate"]) <= set(rl_arms.CONTROL_GRID)  # and the RL side's


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
                       "steps": 850}],
             "control_grid": [{"learning_rate": 1e-5, "gamma": 0.0, "selection_rougeLsum": 40.5,
                               "steps": 1100}],
             "rows": {arm: dict(row, selected_step=step)
                      for arm, step in zip(rl_arms.ARMS, (900, 800, None))},
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
    # the grids record a point's final step, which counts the start's 800; shown are its own
    assert "| 0.0001 | 0.9984 | 41.0 | 50 |" in lines and "| 1e-05 | 40.5 | 300 |" in lines
    assert sum(x.endswith("| steps in the phase |") for x in lines) == 2
    no_start = rc.render({k: v for k, v in state.items() if k != "start"}, {})
    assert "| 0.0001 | 0.9984 | 41.0 | 850 |" in no_start and "| final step |" in no_start
    # --render rewrites the table from rl.json without data or training
    (tmp_path / "rl.json").write_text(json.dumps({**state, "settings": {"score": 1500}}))
    assert rc.main(["--work_dir", str(tmp_path), "--render"]) == 0
    assert "above at p < 0.05" in (tmp_path / "rl_table.md").read_text()
    with pytest.raises(SystemExit, match="rl_samples"):
        rc.main(["--data_dir", str(tmp_path), "--work_dir", str(tmp_path), "--rl_samples", "1"])
    assert isinstance(rc.build_parser(), argparse.ArgumentParser)


def test_the_control_table_sets_the_seed_spread_beside_the_deltas():
    def t(delta, p):
        return {"delta": delta, "delta_ci95": [delta - 0.5, delta + 0.5], "p_value": p}

    tests = {"ML+RL (mixed) vs ML control, rougeLsum": t(0.9, 0.001),
             "ML+RL (mixed) vs ML control, rougeL": t(0.2, 0.3),
             "RL alone vs ML control, rougeLsum": t(-0.4, 0.9),
             "ML+RL (mixed), seed 2 vs ML control, seed 2, rougeLsum": t(0.5, 0.04),
             "ML+RL (mixed), seed 2 vs ML+RL (mixed), rougeLsum": t(-0.3, 0.8),
             "ML control, seed 2 vs ML control, rougeLsum": t(0.1, 0.4)}
    lines = rl_arms.control_table(tests, targets.P_VALUE)
    assert lines[0].startswith("| comparison | seed | metric |") and len(lines) == 2 + 4
    first = lines[2].split(" | ")
    assert first[:3] == ["| ML+RL (mixed) vs ML control", "1", "rougeLsum"]
    assert first[5:7] == ["0.0010", "above at p < 0.05"]
    assert first[7] == "ML+RL (mixed) -0.30; ML control +0.10 |"
    # no rougeL seed tests here
    assert lines[3].endswith("| ML+RL (mixed) (one seed); ML control (one seed) |")
    assert lines[4].startswith("| RL alone vs ML control | 1 |") and "not shown above" in lines[4]
    # RL alone runs under one seed: the mixed arm's spread is not its
    assert lines[4].endswith("| RL alone (one seed); ML control +0.10 |")
    assert lines[5].startswith("| ML+RL (mixed) vs ML control | 2 | rougeLsum | +0.50 |")
    assert rl_arms.control_table({"RL alone vs the start, rougeL": t(1, 0.01)}, 0.05) == []
    md = rc.render({"tests": tests}, {})
    assert "the objective differs, and the learning rate its own grid chose" in md
    assert lines[2] in md
    # two runs of one arm: their delta is the spread, never a verdict
    spread = next(x for x in md.splitlines() if x.startswith("- ML control, seed 2 vs"))
    assert spread.endswith("the spread between two seeds") and "above" not in spread


def test_the_record_names_the_code():
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?|unknown", code_version())
    md = rc.render({"code_versions": ["abc1234", "def5678+changes"]}, {})
    assert "code: abc1234, def5678+changes." in md


def _fake_data(data_dir):
    """The corpus the fake rows decode: their articles (novel words) and a training split (the
    fluency model), as the measures table reads them."""
    import gzip

    for name, n in (("train", 30), ("validation", 20)):
        with gzip.open(data_dir / f"{name}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": f"v{i}", "article": f"a b {i}",
                                     "summary": "a b c"}) + "\n" for i in range(n))


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
        path.write_text("".join(json.dumps({"id": f"v{i}", "decoded": f"a b {i % 3}",
                                            "reference": "a b c"}) + "\n" for i in range(20)))
        return {"name": name, "rouge1": 1.0, "rouge2": 1.0, "rougeLsum": 1.0,
                "decoded": str(path), **info}

    monkeypatch.setattr(rc.Table, "train_phase", train_phase)
    monkeypatch.setattr(rc.Table, "evaluate", evaluate)
    _fake_data(tmp_path)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--grid_learning_rates", "1e-4",
            "--grid_gammas", "0.9984,0.99", "--control_learning_rates", "1e-4,3e-4"]
    assert rc.main([*args, "--stop_after", "start"]) == 0
    assert trained == ["start"] and len(scored) == 1
    state = json.loads((work / "rl.json").read_text())
    assert "grid" not in state and state["start"]["row"]["name"] == scored[0]
    assert rc.main([*args, "--stop_after", "control"]) == 0  # the control is the first arm
    assert trained == ["start", "lr0.0001_g0.9984", "lr0.0001_g0.99", "lr0.0001", "lr0.0003",
                       "control"]
    assert scored == [scored[0], "paulus2017 converged start, ML control"]
    state = json.loads((work / "rl.json").read_text())
    assert state["chosen"]["gamma"] == 0.99 and "tests" not in state  # the later point scored more
    assert state["control_chosen"] == {"learning_rate": 3e-4}
    assert [g["learning_rate"] for g in state["control_grid"]] == [1e-4, 3e-4]
    # some arms in a run of their own: the tests still cover every arm the work dir has scored
    assert rc.main([*args, "--arms", "mixed,rl"]) == 0
    assert trained[6:] == ["mixed", "rl"]
    state = json.loads((work / "rl.json").read_text())
    assert {"ML+RL (mixed) vs ML control, rougeLsum", "RL alone vs ML control, rougeL",
            "ML control vs the start, rougeLsum"} <= set(state["tests"])
    assert rc.main(args) == 0
    assert trained[8:] == ["mixed_seed2", "control_seed2", "ml"]
    assert len(scored) == 7
    state = json.loads((work / "rl.json").read_text())
    assert set(state["rows"]) == set(rl_arms.ARMS)
    # each RL arm against the control of its seed (3) and ML continued (2), each seed-2 arm
    # against seed 1 (2), every arm against the start (6); ROUGE-Lsum and ROUGE-L
    assert len(state["tests"]) == 2 * (3 + 2 + 2 + 6)
    for name in ("RL alone vs ML continued, rougeL", "ML continued vs the start, rougeLsum",
                 "ML+RL (mixed), seed 2 vs ML control, seed 2, rougeLsum",
                 "ML control, seed 2 vs ML control, rougeL"):
        assert name in state["tests"]
    assert len(state["code_versions"]) == 4  # one a run
    md = (work / "rl_table.md").read_text()
    assert "| RL alone |" in md and "| ML control, seed 2 |" in md
    assert "| ML+RL (mixed) vs ML control | 2 | rougeLsum |" in md
    # the decoded outputs kept, gzipped, recompute the tests
    for arm, row in state["rows"].items():
        assert row["decoded_kept"] == f"decoded/{rl_arms.ARM_DIRS[arm]}.jsonl.gz"
    kept = {arm: str(work / row["decoded_kept"]) for arm, row in state["rows"].items()}
    again = significance.compare(kept["ML control"], kept["ML+RL (mixed)"], "rougeLsum")
    assert again == state["tests"]["ML+RL (mixed) vs ML control, rougeLsum"]
    assert "decoded/control_seed2.jsonl.gz" in md
    # the measures RL is not trained on, every default comparison tested on each
    measures = json.loads((work / "measures.json").read_text())
    assert set(measures["tests"]) == set(measures_table.DEFAULT_COMPARE)
    assert "| ML+RL (mixed), seed 2 vs ML control, seed 2 |" in (work / "measures.md").read_text()


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
        path.write_text("".join(json.dumps({"id": f"v{i}", "decoded": f"a b {i % (2 + len(scored))}",
                                            "reference": "a b c"}) + "\n" for i in range(20)))
        return {"name": name, "rouge1": 1.0, "rouge2": 1.0, "rougeLsum": 1.0,
                "decoded": str(path), **info}

    monkeypatch.setattr(rc.Table, "train_phase", train_phase)
    monkeypatch.setattr(rc.Table, "evaluate", evaluate)
    _fake_data(tmp_path)
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
    (["--arms", "rl", "--stop_after", "control_grid"], "runs no ML control"),
    (["--arms", "ml,control", "--stop_after", "grid"], "no RL grid"),
    (["--control_point", "0"], "learning rate > 0"),
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
    from research.studies.digest_table import DigestTable

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


def test_the_control_and_its_grid_evaluate_as_often_a_minute_as_the_rl_arms(tmp_path,
                                                                            monkeypatch):
    trained, _ = _fake_phases(monkeypatch, tmp_path)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--arms", "control",
            "--control_learning_rates", "1e-4"]
    assert rc.main(args) == 0
    every = rc.CORPORA["descriptions"]["control_eval_every"]
    assert [name for name, _ in trained] == ["start", "lr0.0001", "control"]
    for _, extra in trained[1:]:
        assert f"train.eval_every={every}" in extra
    assert rc.main([*args, "--work_dir", str(tmp_path / "w2"), "--control_eval_every", "200"]) == 0
    assert "train.eval_every=200" in trained[-1][1]


def test_a_resumed_run_on_another_cpu_type_is_refused_unless_allowed(tmp_path, monkeypatch):
    """Phases are timed, so a phase trained on another CPU type gets another number of steps:
    a resumed run on a machine whose CPU flags differ from the first run's is refused before
    any work, unless --allow_cpu_change, and the table then names each phase's flags."""
    from research.studies import resumable

    trained, _ = _fake_phases(monkeypatch, tmp_path)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--point", "3e-4,0.99",
            "--arms", "rl,mixed"]
    monkeypatch.setattr(resumable, "cpu_flags", lambda: "avx2 avx512f avx512_bf16")
    assert rc.main([*args, "--stop_after", "mixed"]) == 0
    md = (work / "rl_table.md").read_text()
    assert "; CPU flags: avx2 avx512f avx512_bf16; code:" in md
    before = (work / "rl.json").read_text()
    monkeypatch.setattr(resumable, "cpu_flags", lambda: "avx2")
    with pytest.raises(SystemExit, match="ran on a CPU with flags 'avx2 avx512f avx512_bf16'; "
                                         "this machine's are 'avx2'"):
        rc.main(args)
    assert [name for name, _ in trained] == ["start", "mixed"]  # nothing ran
    assert (work / "rl.json").read_text() == before  # nor was written
    assert rc.main([*args, "--allow_cpu_change"]) == 0
    assert [name for name, _ in trained] == ["start", "mixed", "rl"]
    state = json.loads((work / "rl.json").read_text())
    assert state["phase_cpu_flags"] == {"start": "avx2 avx512f avx512_bf16",
                                        "arms/mixed": "avx2 avx512f avx512_bf16",
                                        "arms/rl": "avx2"}
    assert [r["cpu_flags"] for r in state["runs"]] == ["avx2 avx512f avx512_bf16", "avx2"]
    md = (work / "rl_table.md").read_text()
    assert "CPU flags differ between phases" in md and "arms/rl: avx2;" in md


def test_a_state_file_from_before_runs_were_listed_keeps_its_cpu_type(tmp_path, monkeypatch):
    """A study begun by older code recorded only its settings' CPU flags: they stay the study's
    CPU type when it resumes."""
    from research.studies import resumable

    _fake_phases(monkeypatch, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "rl.json").write_text(json.dumps({"code_versions": ["abc1234"],
                                              "settings": {"cpu_flags": "avx2 avx512f"}}))
    monkeypatch.setattr(resumable, "cpu_flags", lambda: "avx2")
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--point", "3e-4,0.99",
            "--arms", "rl"]
    with pytest.raises(SystemExit, match="flags 'avx2 avx512f'"):
        rc.main(args)
    monkeypatch.setattr(resumable, "cpu_flags", lambda: "avx2 avx512f")
    assert rc.main(args) == 0
    state = json.loads((work / "rl.json").read_text())
    assert state["runs"][0] == {"code": "abc1234", "cpu_flags": "avx2 avx512f"}
