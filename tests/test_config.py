import json

import pytest

from pgn_tf import config


def test_see2017_presets_hold_the_paper_values():
    cfg = config.resolve("see2017_coverage")
    assert (cfg.model.hidden_dim, cfg.model.emb_dim, cfg.data.vocab_size) == (256, 128, 50_000)
    assert (cfg.train.batch_size, cfg.data.max_enc_steps, cfg.data.max_dec_steps) == (16, 400, 100)
    assert cfg.train.optimizer == "adagrad"
    assert (cfg.train.learning_rate, cfg.train.adagrad_init_acc) == (0.15, 0.1)
    assert (cfg.train.max_grad_norm, cfg.model.cov_loss_wt) == (2.0, 1.0)
    assert cfg.model.coverage and cfg.model.pointer_gen
    assert not config.resolve("see2017_baseline").model.pointer_gen
    assert not config.resolve("see2017_pgn").model.coverage


def test_overrides_parse_by_field_type():
    cfg = config.resolve(
        "see2017_pgn",
        ["model.hidden_dim=64", "model.coverage=true", "train.learning_rate=0.5",
         "data.vocab_size=5000", "train.max_steps=7", "train.checkpoint_every=3",
         "data.max_enc_steps=100", "data.max_dec_steps=20", "train.batch_size=4",
         "model.emb_dim=8", "model.pointer_gen=false"],
    )
    assert cfg.model.hidden_dim == 64 and cfg.model.coverage is True
    assert cfg.train.learning_rate == 0.5 and cfg.model.pointer_gen is False
    assert cfg.train.checkpoint_every == 3


@pytest.mark.parametrize(
    "override, message",
    [("model.hiden_dim=3", "unknown config key 'model.hiden_dim'"),
     ("modle.hidden_dim=3", "unknown config key"),
     ("model.coverage=maybe", "bad value for 'model.coverage'"),
     ("model.hidden_dim", "expects section.key=value")],
)
def test_bad_overrides_name_the_culprit(override, message):
    with pytest.raises(ValueError, match=message):
        config.resolve("see2017_pgn", [override])


def test_yaml_file_with_preset_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("preset: see2017_baseline\nmodel:\n  hidden_dim: 32\ntrain:\n  max_steps: 9\n")
    cfg = config.load(str(path))
    assert cfg.model.hidden_dim == 32 and not cfg.model.pointer_gen and cfg.train.max_steps == 9
    cfg.save(str(tmp_path / "config.json"))
    again = config.load_from_model_dir(str(tmp_path))
    assert again == cfg
    assert json.loads((tmp_path / "config.json").read_text())["model"]["hidden_dim"] == 32


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown config 'nope'"):
        config.load("nope")


def test_set_parses_by_the_fields_type_not_the_presets_value():
    from pgn_tf import config

    cfg = config.resolve("debian_pgn", ["train.max_minutes=0.5"])  # the preset holds an int
    assert cfg.train.max_minutes == 0.5
