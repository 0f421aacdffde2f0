"""The quality table's claims and targets are computed from the rows, not written by hand."""

import json
import os

import pytest

from research.studies import quality_table

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)

COV = quality_table.COV


def _row(name, r1, stage="see", **extra):
    row = {"name": name, "stage": stage, "rouge1": r1, "rouge1_ci95": [r1 - 1, r1 + 1],
           "rouge2": r1 / 2, "rouge2_ci95": [0, r1], "rougeLsum": r1 - 2,
           "rougeLsum_ci95": [0, r1], "dup_3gram_pct": 1.0, "repeat_word_outputs_pct": 10.0,
           "novel_2gram_pct": 30.0, "unk_outputs_pct": 0.0, "raw_unk_outputs_pct": 5.0,
           "reference_repeat_word_pct": 6.0}
    row.update(extra)
    return row


def _table(tmp_path, rows, extra=None):
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    (work / "settings.json").write_text(json.dumps({"minutes": 60}))
    table = quality_table.Table(quality_table.TableSettings(
        data_dir=str(tmp_path), work_dir=str(work), score=100, tune=10))
    table.rows, table.extra = rows, extra or {}
    return table


def _rows(cov_r1=50.0, cov_repeat=7.5, seeds=(47.0, 47.4), ml_lsum=40.0, rl_lsum=41.0,
          ppl=(40.0, 35.0, 27.0), abs_plus=31.0, cov_unk=0.5):
    return [
        _row("lead-8 words", 30.0, "lead"),
        _row("see2017 baseline", 20.0, raw_unk_outputs_pct=80.0, repeat_word_outputs_pct=40.0),
        _row("see2017 pointer-generator", 38.0, raw_unk_outputs_pct=5.0,
             repeat_word_outputs_pct=20.0),
        _row(COV, cov_r1, repeat_word_outputs_pct=cov_repeat, unk_outputs_pct=cov_unk),
        _row(f"{COV}, 20 min, seed 1", seeds[0], "seeds"),
        _row(f"{COV}, 20 min, seed 2", seeds[1], "seeds"),
        _row("paulus2017, ML continued", 40.0, "paulus", rougeLsum=ml_lsum),
        _row("paulus2017, ML+RL (mixed)", 40.0, "paulus", rougeLsum=rl_lsum),
        _row("rush2015 ABS (bow encoder)", 20.0, "abs", perplexity=ppl[0]),
        _row("rush2015 ABS (conv encoder)", 21.0, "abs", perplexity=1000.0),  # superseded:
        _row("rush2015 ABS (conv encoder, layer-normalised)", 21.0, "abs", perplexity=ppl[1]),
        _row("rush2015 ABS (attention encoder)", 22.0, "abs", perplexity=ppl[2]),
        _row("rush2015 ABS+ (attention)", abs_plus, "abs", unk_outputs_pct=3.0),
    ]


def _claim(claims, start):
    found = [c for c in claims if c.startswith(start)]
    assert len(found) == 1, (start, claims)
    return found[0]


def _test(p, delta):
    return {"paulus_rl_test": {"p_value": p, "delta": delta, "delta_ci95": [delta - 1, delta + 1]}}


def test_claims_and_targets_follow_the_rows(tmp_path):
    claims = _table(tmp_path, _rows(), _test(0.01, 1.0)).claims()
    assert _claim(claims, "pointer-generator beats").endswith("holds")
    assert _claim(claims, "coverage reduces").endswith("holds")
    assert _claim(claims, "target: coverage ROUGE-1 >= 49.0").endswith("met by 1.00")
    # 50.0 vs the better seed 47.4, spread 0.4: met by 2.2
    assert _claim(claims, "target: coverage at the full").endswith("met by 2.20")
    assert _claim(claims, "target: [UNK]").endswith("met by 0.50")
    assert _claim(claims, "target: outputs repeating").endswith("met by 0.50")  # 6 + 2 - 7.5
    assert ": met; repeat-word outputs" in _claim(claims, "target (paulus2017)")
    assert _claim(claims, "ABS encoders").endswith("holds")
    plus = _claim(claims, "target: ABS+")
    assert "met by 1.00" in plus and "(22.0): holds" in plus and plus.endswith("met by 17.00")

    claims = _table(tmp_path, _rows(cov_r1=48.0, cov_repeat=21.0, seeds=(47.5, 48.0),
                                    ppl=(30.0, 35.0, 27.0), abs_plus=29.0, cov_unk=2.0),
                    _test(0.2, 0.5)).claims()
    assert _claim(claims, "coverage reduces").endswith("does not hold")
    assert _claim(claims, "target: coverage ROUGE-1 >= 49.0").endswith("missed by 1.00")
    assert _claim(claims, "target: coverage at the full").endswith("missed by 0.50")
    assert _claim(claims, "target: [UNK]").endswith("missed by 1.00")
    assert ": missed; repeat-word" in _claim(claims, "target (paulus2017)")
    assert _claim(claims, "ABS encoders").endswith("does not hold")
    assert "missed by 1.00" in _claim(claims, "target: ABS+")


def test_table_has_a_row_per_system_and_the_reference_rate(tmp_path):
    text = _table(tmp_path, _rows()).table()
    lines = [x for x in text.splitlines() if x.startswith("| ")]
    assert len(lines) == 1 + 13  # the header and one line per system
    assert "| 50.00 [49.00, 51.00] |" in text
    assert text.rstrip().endswith("References: 6.0% of them repeat a word (word tokens, "
                                  "punctuation excluded).")


def test_the_see_rl_arms_count_the_whole_see_run(tmp_path, monkeypatch):
    # Their starting model dir's train_result.json holds the coverage phase alone (15 of 60
    # minutes); the arms' rows must count both phases, from the see stage's row.
    table = _table(tmp_path, [_row(COV, 46.0, train_minutes=60.3, train_steps=9845)])
    table.a.rl_minutes = 20.0
    calls = []
    monkeypatch.setattr(table, "arms", lambda *args: calls.append(args))
    table.stage_see_rl()
    (stage, start_dir, preset, _, minutes, ml_train), = calls
    assert (stage, preset, minutes) == ("see_rl", "debian_coverage", 20.0)
    assert start_dir == table.w("pgn")
    assert ml_train == [{"wall_seconds": 60 * 60.3, "final_step": 9845}]


def test_an_arm_starts_from_the_model_alone_not_from_the_other_arm(tmp_path, monkeypatch):
    # The paulus stage's arms live inside its model dir (paulus/ML, paulus/ML_RL).
    table = _table(tmp_path, [])
    start = tmp_path / "w" / "paulus"
    (start / "ckpt").mkdir(parents=True)
    (start / "ckpt" / "ckpt-1.index").write_text("x")
    (start / "ML").mkdir()  # an earlier run's arm
    (start / "ML" / "stale").write_text("x")
    seen = {}

    def train_phase(d, preset, minutes, extra=()):
        seen[os.path.basename(d)] = sorted(os.listdir(d))
        return {"wall_seconds": 60.0, "final_step": 2}

    monkeypatch.setattr(table, "train_phase", train_phase)
    monkeypatch.setattr(table, "evaluate", lambda *a, **k: {"decoded": "x"})
    monkeypatch.setattr("pgn_tf.metrics.significance.compare", lambda *a: {"p_value": 1.0})
    table.arms("paulus", str(start), "debian_paulus", "paulus2017", 1.0, [])
    assert seen == {"ML": ["ckpt"], "ML_RL": ["ckpt"]}


def test_the_see_rl_stage_without_the_see_stage_says_so(tmp_path):
    table = _table(tmp_path, [_row("lead-8 words", 30.0, "lead")])
    table.a.rl_minutes = 20.0
    with pytest.raises(SystemExit, match="--stages see first"):
        table.stage_see_rl()


@pytest.mark.parametrize("delta, verdict", [(-0.4, "holds"), (-1.5, "does not hold")])
def test_the_precision_verdict_reads_the_paired_test(tmp_path, delta, verdict):
    # Costs no ROUGE while the interval of (fast - float32) reaches 0; here it is delta +- 1.
    (a, _), (b, _) = quality_table.PRECISION_ARMS
    rows = [_row(f"{COV}, 20 min, {a}", 45.0, "precision", train_steps=4000),
            _row(f"{COV}, 20 min, {b}", 44.6, "precision", train_steps=6500)]
    test = {"delta": delta, "delta_ci95": [delta - 1, delta + 1], "p_value": 0.7,
            "cpu_flags": "avx2 avx512f avx512_bf16"}
    claim = _claim(_table(tmp_path, rows, {"precision_test": test}).claims(), b)
    assert "ROUGE-1 44.6 vs 45.0 in 6500 vs 4000 steps" in claim
    assert claim.startswith(f"{b} vs {a} under the same budget")
    assert f"not shown to cost ROUGE (the delta's 95% interval reaches 0): {verdict} (CPU flags avx2 avx512f avx512_bf16)" in claim
    # one arm alone: no verdict
    one = _table(tmp_path, rows[:1], {"precision_test": test}).claims()
    assert not [c for c in one if c.startswith(b)]


def test_the_cpu_types_lines_read_each_arm_and_the_paired_test(tmp_path):
    # An arm's name holds ", " itself: each row is found by its whole suffix.
    (a, _, _), (b, _, env) = quality_table.CPU_TYPE_ARMS
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    rows = [_row(f"{COV}, 60 min, {a}", 47.9, "cpu_types", train_steps=15000,
                 precision="mixed_bfloat16"),
            _row(f"{COV}, 60 min, {b}", 47.1, "cpu_types", train_steps=12000, precision="float32")]
    test = {"delta": 0.8, "delta_ci95": [0.1, 1.5], "p_value": 0.01, "cpu_flags": "avx2"}
    claims = _table(tmp_path, rows, {"cpu_types_test": test}).claims()
    assert _claim(claims, f"{a}: ") == (f"{a}: mixed_bfloat16 in 15000 steps, ROUGE-1/2/Lsum "
                                        f"47.9/23.95/45.9")
    assert "float32 in 12000 steps" in _claim(claims, f"{b}: ")
    assert "ROUGE-Lsum delta 0.8 [0.1, 1.5], one-sided p = 0.0100 (CPU flags avx2)" in _claim(
        claims, f"{a} vs {b}")
    one = _table(tmp_path, rows[:1], {"cpu_types_test": test}).claims()
    assert not [c for c in one if c.startswith(f"{a} vs {b}")]


def test_a_phase_runs_with_the_arm_environment_and_this_process_keeps_its_own(tmp_path):
    from research.common import sh

    log = str(tmp_path / "log.txt")
    sh(["-c", "import os; print('cap=' + os.environ.get('ONEDNN_MAX_CPU_ISA', 'none'))"], log,
       {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    sh(["-c", "import os; print('cap=' + os.environ.get('ONEDNN_MAX_CPU_ISA', 'none'))"], log)
    lines = [x for x in open(log).read().splitlines() if x.startswith("cap=")]
    assert lines == ["cap=AVX2", "cap=" + os.environ.get("ONEDNN_MAX_CPU_ISA", "none")]


def test_a_failed_command_raises_with_the_logs_tail(tmp_path):
    from research.common import sh

    log = str(tmp_path / "log.txt")
    with pytest.raises(RuntimeError, match="(?s)failed:.*the last words"):
        sh(["-c", "import sys; print('the last words'); sys.exit(3)"], log)
    sh(["-c", "print('after')"], log)  # the log is appended to, never rewritten
    text = open(log).read()
    assert "the last words" in text and text.rstrip().endswith("after")
