"""The ABS+ study's pieces: its models and overrides (valid config keys), the lead row matched
to each preset's text normalisation, the target's verdict, and a stopped run resuming without
redoing a model, and a model tuned and scored again (not trained) when its preset's decoding
changed."""

import json
import os

import pytest

from pgn_tf import config as config_lib
from research.studies import abs_study as ab
from research.studies import targets

pytestmark = pytest.mark.study  # research, apart from the product (pyproject.toml)


@pytest.mark.parametrize("model", ab.MODELS)
def test_each_models_overrides_are_the_presets_keys(model):
    preset, encoder = model.split(":")
    cfg = config_lib.resolve(preset, ab.train_overrides(model))
    cfg.validate()
    assert cfg.model.model_type == "abs" and cfg.model.abs_encoder == encoder
    assert cfg.train.max_steps >= 100_000  # an hour is never cut short by the step cap
    paper = config_lib.resolve(preset)
    # the paper's preset keeps every modelling and decoding choice of its own
    assert (cfg.model, cfg.decode, cfg.data) == (
        config_lib.resolve(preset, [f"model.abs_encoder={encoder}"]).model, paper.decode,
        paper.data)


def test_models_parse_and_the_corpus_preset_runs_first():
    assert ab.MODELS[0] == "debian_abs:conv" and len(ab.MODELS) == 6
    assert ab.parse_models("rush2015_abs:bow, debian_abs:attention") == [
        "rush2015_abs:bow", "debian_abs:attention"]
    with pytest.raises(Exception, match="unknown model"):
        ab.parse_models("debian_abs:lstm")
    with pytest.raises(SystemExit):
        ab.build_parser().parse_args(["--stop_after", "abs"])


def test_the_lead_row_is_normalised_as_the_presets_text():
    """The paper's preset (and debian_abs, built on it) replaces digits by #: its references
    are compared with a lead-8 scored on the same references."""
    assert ab.lead_name("rush2015_abs") == "lead-8 words (digits as #)"
    assert ab.lead_name("debian_pgn") == "lead-8 words"


def test_the_verdict_needs_the_test_and_few_unks():
    above = {"delta": 1.2, "delta_ci95": [0.3, 2.0], "p_value": targets.P_VALUE / 10}
    level = {"delta": 0.4, "delta_ci95": [-0.5, 1.3], "p_value": 0.2}
    assert ab.verdict(above, 5.0) == {"above_lead": True, "unk_ok": True, "met": True}
    assert not ab.verdict(above, targets.ABS_PLUS_MAX_UNK_PCT)["met"]
    assert not ab.verdict(level, 0.0)["met"] and not ab.verdict(above, None)["met"]


def test_a_stopped_run_resumes_without_redoing_a_model(tmp_path, monkeypatch):
    """--stop_after ends a run after one model; the next run reuses it (trained, tuned, scored)
    and its lead row. The training, tuning and scoring are the quality table's commands (tested
    there); here they write what they would, and count."""
    trained, scored, tuned = [], [], []

    def train_phase(self, model_dir, preset, minutes, extra=()):
        trained.append((os.path.basename(model_dir), preset, tuple(extra)))
        os.makedirs(model_dir, exist_ok=True)
        result = {"final_step": 100, "wall_seconds": 60.0 * minutes}
        with open(os.path.join(model_dir, "train_result.json"), "w") as f:
            json.dump(result, f)
        os.makedirs(os.path.join(model_dir, "best"), exist_ok=True)
        with open(os.path.join(model_dir, "best", "best.json"), "w") as f:
            json.dump({"step": 80, "metric": "loss"}, f)  # selection stopped before the end
        return result

    def evaluate(self, name, stage, model_dir, extra=(), train=None, **info):
        scored.append(name)
        if model_dir:  # ABS and ABS+ decode as the preset decodes now
            assert all(x in extra for x in ab.set_flags(ab.decode_overrides(name.split(":")[0])))
        path = tmp_path / (name.replace(" ", "_").replace(":", "_") + ".jsonl")
        good = "lead" not in name and "ABS+" in name
        path.write_text("".join(json.dumps({
            "decoded": "a b c" if good or i % 2 else "x y", "reference": "a b c"}) + "\n"
            for i in range(30)))
        return {"name": name, "rouge1": 50.0, "rouge2": 20.0, "rougeLsum": 50.0,
                "unk_outputs_pct": 0.0, "decoded": str(path), **info}

    def sh(args, log):
        assert args[:2] == ["-m", "pgn_tf.tune"]
        d = args[args.index("--model_dir") + 1]
        tuned.append(os.path.basename(d))
        flags = ab.set_flags(ab.decode_overrides(os.path.basename(d).rsplit("_", 1)[0]))
        assert args[-len(flags):] == flags  # tuned under the decoding it is scored with
        with open(os.path.join(d, "abs_plus.json"), "w") as f:
            json.dump({"weights": "1,1,0,0.5,-0.5"}, f)

    monkeypatch.setattr(ab.Table, "train_phase", train_phase)
    monkeypatch.setattr(ab.Table, "evaluate", evaluate)
    monkeypatch.setattr(ab, "sh", sh)
    work = tmp_path / "work"
    args = ["--data_dir", str(tmp_path), "--work_dir", str(work), "--minutes", "2",
            "--models", "debian_abs:conv,rush2015_abs:attention"]
    assert ab.main([*args, "--stop_after", "debian_abs:conv"]) == 0
    assert [t[:2] for t in trained] == [("debian_abs_conv", "debian_abs")]
    assert "--set" in trained[0][2] and "model.abs_encoder=conv" in trained[0][2]
    assert scored == ["lead-8 words (digits as #)", "debian_abs:conv ABS",
                      "debian_abs:conv ABS+"] and tuned == ["debian_abs_conv"]
    assert ab.main(args) == 0
    assert [t[0] for t in trained] == ["debian_abs_conv", "rush2015_abs_attention"]
    assert "train.max_steps=1000000" in trained[1][2]
    assert len(scored) == 5 and tuned == ["debian_abs_conv", "rush2015_abs_attention"]
    state = json.loads((work / "abs.json").read_text())
    assert len(state["code_versions"]) == 2
    test = state["models"]["debian_abs:conv"]["tests"]["rouge1"]
    assert test["delta"] > 0 and test["p_value"] < targets.P_VALUE
    md = (work / "abs_table.md").read_text()
    assert "| debian_abs:conv ABS+ (1,1,0,0.5,-0.5) |" in md
    assert [m["selected_step"] for m in state["models"].values()] == [80, 80]
    assert md.count(" | 80 | ") == 4  # each model's ABS and ABS+ rows name the checkpoint
    assert "- rush2015_abs:attention ABS+ vs lead-8 words (digits as #), rougeLsum" in md
    assert md.count("target met") == 4
    assert ab.main(["--work_dir", str(work), "--render"]) == 0
    assert (work / "abs_table.md").read_text() == md

    # the study's own --set reaches the decoding it scores under
    assert "decode.beam_size=7" in ab.decode_overrides("debian_abs", ["decode.beam_size=7"])

    # the corpus preset's decoding changes after its model was scored: tuned and scored again
    # under the new decoding, not trained again; the other model's scores are reused
    changed = [*ab.decode_overrides("debian_abs")[:-1], "decode.sentence_lines=True"]
    real = ab.decode_overrides
    monkeypatch.setattr(ab, "decode_overrides",
                        lambda p, o=(): changed if p == "debian_abs" else real(p, o))
    scored.clear()
    assert ab.main(args) == 0
    assert len(trained) == 2 and tuned[2:] == ["debian_abs_conv"]
    assert scored == ["debian_abs:conv ABS", "debian_abs:conv ABS+"]
    state = json.loads((work / "abs.json").read_text())
    assert state["models"]["debian_abs:conv"]["decode"] == changed
    assert state["models"]["rush2015_abs:attention"]["decode"] == real("rush2015_abs")
