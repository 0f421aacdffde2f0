"""inference.loading: the decoding config a model dir's model is used with: its config, then the
ABS+ weights `pgn_tf.tune` wrote into the dir, then the caller's --set, saying which."""

import json
import logging

import pytest

from pgn_tf import config as config_lib
from pgn_tf.inference.loading import decode_config
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils.errors import UserError


def _model_dir(tmp_path, weights=None) -> str:
    config_lib.Config().save(str(tmp_path / "config.json"))
    if weights is not None:
        ModelDir(str(tmp_path)).write_abs_plus({"metric": "rougeLsum", "weights": weights})
    return str(tmp_path)


def _cfg(model_dir: str) -> config_lib.Config:
    return ModelDir(model_dir).read_config()


def test_tuned_weights_are_used_and_logged(tmp_path, caplog):
    d = _model_dir(tmp_path, "1,0.5,0,0,-1")
    with caplog.at_level(logging.INFO, logger="pgn_tf"):
        cfg = decode_config(_cfg(d), d, ["decode.beam_size=2"])
    assert cfg.decode.abs_plus_weights == "1,0.5,0,0,-1" and cfg.decode.beam_size == 2
    assert caplog.messages == [f"ABS+ weights 1,0.5,0,0,-1 from {tmp_path / 'abs_plus.json'}"]


@pytest.mark.parametrize("value", ["", "1,0,0,0,0"])
def test_set_overrides_the_tuned_weights_and_says_so(tmp_path, caplog, value):
    d = _model_dir(tmp_path, "1,0.5,0,0,-1")
    with caplog.at_level(logging.INFO, logger="pgn_tf"):
        cfg = decode_config(_cfg(d), d, [f"decode.abs_plus_weights={value}"])
    assert cfg.decode.abs_plus_weights == value
    assert len(caplog.messages) == 1 and "overridden by --set" in caplog.messages[0]


def test_without_tuned_weights_nothing_changes(tmp_path, caplog):
    d = _model_dir(tmp_path)
    with caplog.at_level(logging.INFO, logger="pgn_tf"):
        cfg = decode_config(_cfg(d), d)
    assert cfg.decode.abs_plus_weights == config_lib.Config().decode.abs_plus_weights
    assert caplog.messages == []


def test_a_damaged_abs_plus_json_is_a_user_error(tmp_path):
    d = _model_dir(tmp_path)
    (tmp_path / "abs_plus.json").write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        decode_config(_cfg(d), d)
    (tmp_path / "abs_plus.json").write_text(json.dumps({"weights": 3}))
    with pytest.raises(UserError, match="no \"weights\""):
        decode_config(_cfg(d), d)
    (tmp_path / "abs_plus.json").write_text(json.dumps({"weights": "1,2"}))
    with pytest.raises(ValueError, match="5 comma-separated"):
        decode_config(_cfg(d), d)
