"""The training behaviours every CPU type must show, under each precision policy.

`train.mixed_precision=auto` resolves to float32 on a CPU without native bf16 (most rented AMD
and pre-Cooper-Lake Intel machines) and to mixed_bfloat16 on one with AVX512_BF16 or AMX, so a
user's run takes one of two numeric paths depending on the machine. Each test here names its
policy instead of asking for `auto`, so both paths run on every machine: bf16 where the CPU lacks
it is emulated (slower, still correct). What is checked is behaviour, not numbers: the loss
falls, a phase converts, the RL objective trains, and the variables stay float32."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

POLICIES = ["float32", "mixed_bfloat16"]


def refused_here(policy: str) -> str | None:
    """Why `policy` is refused in this process (hardware.bf16_crash_under_cap: bf16 under an
    oneDNN cap below AVX-512 on a CPU with AVX-512, as .ci/run's second pass runs there), else
    None. There the test checks the refusal instead: the first pass ran bf16 uncapped."""
    from pgn_tf.training import hardware

    return hardware.bf16_crash_here() if policy == "mixed_bfloat16" else None


def check_refused(policy, model_dir, run) -> bool:
    """True (after checking it) where `policy` is refused here: run() raises the one-line
    UserError and writes nothing in model_dir."""
    if not refused_here(policy):
        return False
    from pgn_tf.utils.errors import UserError

    with pytest.raises(UserError, match="bf16 cannot run under ONEDNN_MAX_CPU_ISA"):
        run()
    assert not os.path.exists(model_dir) or not os.listdir(model_dir)
    return True


def _train(model_dir, corpus, config, overrides):
    from pgn_tf.training.run import train

    return train(str(model_dir), config, overrides, train_data=corpus["train"],
                 eval_data=corpus["validation"], progress=False).as_dict()


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_ml_then_coverage_then_mixed_rl_under_each_policy(policy, tmp_path, corpus):
    """See et al.'s two phases then Paulus et al.'s mixed objective in one model dir."""
    common = [f"train.mixed_precision={'' if policy == 'float32' else policy}",
              "model.hidden_dim=32", "model.emb_dim=16", "data.max_enc_steps=60",
              "data.max_dec_steps=12", "decode.max_dec_steps=14", "train.eval_batches=2",
              "train.eval_samples=0", "train.optimizer=adam", "train.learning_rate=0.01"]
    first = [*common, "train.max_steps=40", "train.eval_every=40"]
    if check_refused(policy, tmp_path, lambda: _train(tmp_path, corpus, "tiny", first)):
        return
    ml = _train(tmp_path, corpus, "tiny", first)
    assert ml["precision"] == policy
    assert np.isfinite(ml["loss"]) and ml["eval_loss"] < ml["initial_eval_loss"], ml

    cov = _train(tmp_path, corpus, "tiny", [*common, "model.coverage=true", "train.max_steps=44",
                                          "train.eval_every=4"])
    assert cov["final_step"] == 44 and np.isfinite(cov["coverage_loss"]), cov
    assert 0 <= cov["coverage_loss"] and np.isfinite(cov["eval_loss"])

    rl = _train(tmp_path, corpus, "tiny", [*common, "model.coverage=true",
                                         "train.objective=mixed", "train.max_steps=47",
                                         "train.eval_every=3", "train.log_every=1"])
    assert rl["final_step"] == 47 and np.isfinite(rl["loss"]), rl
    assert 0 <= rl["reward_sample"] <= 1 and "initial_eval_reward" in rl
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    weights = {n: d for n, d in reader.get_variable_to_dtype_map().items()
               if "OPTIMIZER_SLOT" not in n and "kernel" in n}
    assert weights and all(d == tf.float32 for d in weights.values())
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["train"]["objective"] == "mixed"


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("encoder", ["bow", "conv", "attention"])
def test_abs_encoders_learn_under_each_policy(policy, encoder, tmp_path, corpus):
    """Rush et al.'s three encoders with the paper's plain SGD on summed NLL and no clipping,
    at tests/models/test_abs.py's settings (ABS_TEST_SETTINGS, half the steps): the eval loss falls on every
    CPU type and either path."""
    from tests.models.test_abs import ABS_TEST_SETTINGS, parallel_text

    train_data = parallel_text(corpus, tmp_path)
    from pgn_tf.training.run import train

    def run():
        return train(str(tmp_path / encoder), "rush2015_abs",
                     [*ABS_TEST_SETTINGS, f"model.abs_encoder={encoder}",
                      f"train.mixed_precision={'' if policy == 'float32' else policy}",
                      "train.max_steps=40", "train.eval_every=40"],
                     train_data=train_data, eval_data=corpus["validation"], progress=False)

    if check_refused(policy, tmp_path / encoder, run):
        return
    result = run()
    assert result.precision == policy
    assert result.metrics["eval_loss"] < 0.8 * result.metrics["initial_eval_loss"], result
