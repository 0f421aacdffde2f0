"""The checkpoint sweep's checkpoint listing and its selection rules."""

import pytest

from research.studies import checkpoint_sweep

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


def test_checkpoints_are_listed_by_step_from_the_first_asked(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for step in (500, 10000, 9500, 12000):
        (ckpt / f"ckpt-{step}.index").write_text("")
        (ckpt / f"ckpt-{step}.data-00000-of-00001").write_text("")
    (ckpt / "checkpoint").write_text("")
    (ckpt / "ckpt-700.data-00000-of-00001").write_text("")  # no index: not a checkpoint
    got = checkpoint_sweep.checkpoints(str(tmp_path), 9500)
    assert [s for s, _ in got] == [9500, 10000, 12000]
    assert got[0][1] == str(ckpt / "ckpt-9500")


def test_a_model_dir_without_checkpoints_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint directory"):
        checkpoint_sweep.checkpoints(str(tmp_path), 0)


def _row(step, loss, nll, val_lsum, val_r1, r1):
    return {"step": step, "eval_loss": loss, "eval_nll": nll, "val_rougeLsum": val_lsum,
            "val_rouge1": val_r1, "rouge1": r1, "rougeLsum": r1 - 3}


def test_each_rule_chooses_its_own_checkpoint():
    rows = [_row(1000, 2.9, 2.9, 40.0, 44.0, 45.0),
            _row(1500, 2.7, 2.8, 43.0, 42.0, 47.5),
            _row(2000, 2.8, 2.6, 41.0, 46.0, 46.0),
            _row(2500, None, None, None, None, 48.0)]  # the phase's last step, never evaluated
    rules = checkpoint_sweep.selection_rules(rows)
    assert rules["lowest eval loss"]["step"] == 1500
    assert rules["lowest eval NLL"]["step"] == 2000
    assert rules["best validation ROUGE-Lsum (the presets' rule)"]["step"] == 1500
    assert rules["best validation ROUGE-1"]["step"] == 2000
    assert rules["the last checkpoint"]["step"] == 2500
    assert rules["best scored ROUGE-1 (oracle)"]["step"] == 2500


def test_rules_without_logged_measures_choose_nothing():
    rules = checkpoint_sweep.selection_rules([_row(1000, None, None, None, None, 45.0)])
    assert rules["lowest eval loss"] is None
    assert rules["best scored ROUGE-1 (oracle)"]["step"] == 1000
