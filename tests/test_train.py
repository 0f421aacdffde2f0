"""The training CLI end to end, in subprocesses (logical CPU devices must be set before TF starts)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from pgn_tf.data import tfrecord
from pgn_tf.data.example import Example

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--set", "model.hidden_dim=16", "--set", "model.emb_dim=8", "--set", "train.batch_size=8",
         "--set", "data.max_enc_steps=50", "--set", "data.max_dec_steps=12",
         "--set", "train.log_every=5", "--set", "train.eval_batches=2", "--quiet"]


def train(model_dir, *extra, check=True, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "pgn_tf.train", "--model_dir", str(model_dir), *SMALL, *extra],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT,
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    """20 steps on 2 logical CPU devices with MirroredStrategy, eval every 10."""
    model_dir = tmp_path_factory.mktemp("run")
    proc = train(model_dir, "--train_data", corpus["train"], "--eval_data", corpus["validation"],
                 "--cpu_devices", "2", "--set", "train.max_steps=20",
                 "--set", "train.checkpoint_every=10", "--set", "train.eval_every=10")
    return model_dir, proc


def test_mirrored_run_writes_checkpoints_config_vocab_and_tensorboard(trained):
    model_dir, proc = trained
    assert "2 replica(s)" in proc.stdout
    assert tf.train.latest_checkpoint(str(model_dir / "ckpt")).endswith("ckpt-20")
    assert (model_dir / "config.json").exists() and (model_dir / "vocab.txt").exists()
    assert (model_dir / "best" / "best.json").exists()
    events = tf.io.gfile.glob(str(model_dir / "train" / "events.*"))
    tags = set()
    for e in tf.compat.v1.train.summary_iterator(events[0]):
        tags |= {v.tag for v in e.summary.value}
    assert {"loss", "grad_norm", "p_gen_mean", "examples_per_sec"} <= tags
    tags = set()
    for fn in tf.io.gfile.glob(str(model_dir / "eval" / "events.*")):
        for e in tf.compat.v1.train.summary_iterator(fn):
            tags |= {v.tag for v in e.summary.value}
    assert {"loss", "sample_0", "attention_0"} <= tags


def test_resume_continues_from_the_last_step_with_identical_variables(trained, corpus):
    model_dir, _ = trained
    reader = tf.train.load_checkpoint(str(model_dir / "ckpt" / "ckpt-20"))
    from pgn_tf import config, vocab
    from pgn_tf.model_dir import ModelDir
    from pgn_tf.trainer import Trainer

    cfg = config.load_from_model_dir(str(model_dir))
    voc = vocab.Vocab.load(str(model_dir / "vocab.txt"), cfg.data.vocab_size)
    files = sorted(tf.io.gfile.glob(corpus["train"]))
    trainer = Trainer(cfg, ModelDir(str(model_dir)), voc, files, None,
                      tf.distribute.get_strategy())
    assert int(trainer.step.numpy()) == 20
    names = {n for n, _ in tf.train.list_variables(str(model_dir / "ckpt" / "ckpt-20"))}
    kernel = [n for n in names if "vocab_proj" in n and "kernel" in n and "optimizer" not in n
              and "OPTIMIZER_SLOT" not in n][0]
    np.testing.assert_array_equal(trainer.model.vocab_proj.kernel.numpy(), reader.get_tensor(kernel))


def test_second_invocation_resumes_and_coverage_converts(trained, corpus):
    model_dir, _ = trained
    proc = train(model_dir, "--train_data", corpus["train"], "--set", "train.max_steps=25")
    assert "resumed from" in proc.stdout and "(step 20)" in proc.stdout
    assert tf.train.latest_checkpoint(str(model_dir / "ckpt")).endswith("ckpt-25")
    proc = train(model_dir, "--train_data", corpus["train"], "--set", "train.max_steps=30",
                 "--set", "model.coverage=true")
    assert "continues with a fresh optimizer" in proc.stdout and "(step 25)" in proc.stdout
    assert '"coverage_loss"' in proc.stdout
    # The best checkpoint predates coverage (no eval since): decoding takes the latest.
    from pgn_tf.inference import load_model

    _, _, model, path = load_model(str(model_dir))
    assert model.coverage and path.endswith("ckpt-30")


def test_killed_run_resumes_from_last_checkpoint(tmp_path, corpus):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "pgn_tf.train", "--model_dir", str(tmp_path), *SMALL,
           "--train_data", corpus["train"], "--set", "train.max_steps=100000",
           "--set", "train.checkpoint_every=5"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    latest = None
    while time.time() < deadline:
        latest = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
        if latest and int(latest.rsplit("-", 1)[1]) >= 10:
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    latest = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert latest, "no checkpoint was written before the kill"
    step = int(latest.rsplit("-", 1)[1])
    out = train(tmp_path, "--train_data", corpus["train"], "--set", f"train.max_steps={step + 3}")
    assert f"(step {step})" in out.stdout


def _snapshot(d):
    return sorted((p, os.path.getmtime(os.path.join(r, p)))
                  for r, _, fs in os.walk(d) for p in fs)


def test_bad_inputs_fail_with_one_line_and_touch_nothing(trained, tmp_path, corpus):
    model_dir, _ = trained
    before = _snapshot(model_dir)
    bad = tmp_path / "bad.tfrecord"
    files = tfrecord.write_tfrecords([Example("a b", "a")] * 3, str(tmp_path / "ok"))
    bad.write_bytes(open(files[0], "rb").read()[:-4])
    (tmp_path / "vocab.txt").write_text("the 3\ncat 2\n")
    cases = [
        (["--train_data", str(tmp_path / "nope.jsonl")], "does not exist"),
        (["--train_data", str(tmp_path / "empty-*.tfrecord")], "matches no file"),
        (["--train_data", str(bad)], "bad.tfrecord is not a readable TFRecord"),
        (["--train_data", corpus["train"], "--set", "model.hiden_dim=3"], "unknown config key"),
        (["--train_data", corpus["train"], "--set", f"data.vocab_path={tmp_path}/vocab.txt"],
         "checkpoint"),
        (["--train_data", corpus["train"], "--set", "model.hidden_dim=32"], "model.hidden_dim=16"),
    ]
    for args, message in cases:
        # the module's model dir was converted to coverage by an earlier test
        proc = train(model_dir, *args, "--set", "model.coverage=true", check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("pgn_tf.train: error:")]
        assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
    assert _snapshot(model_dir) == before


def test_time_budget_and_bfloat16_mixed_precision(tmp_path, corpus):
    """train.max_minutes stops early (checkpoint and eval at the last step); bf16 compute
    trains with finite, falling losses and leaves float32 variables."""
    import json

    proc = train(tmp_path, "--train_data", corpus["train"], "--eval_data", corpus["validation"],
                 "--set", "train.max_steps=100000", "--set", "train.max_minutes=0.1",
                 "--set", "train.mixed_precision=mixed_bfloat16", "--set", "train.eval_every=1000")
    result = json.loads((tmp_path / "train_result.json").read_text())
    assert 0 < result["final_step"] < 100000, proc.stdout[-2000:]
    assert np.isfinite(result["loss"]) and result["eval_loss"] < result["initial_eval_loss"]
    last = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert last.endswith(f"ckpt-{result['final_step']}")
    reader = tf.train.load_checkpoint(last)
    dtypes = reader.get_variable_to_dtype_map()
    assert all(d == tf.float32 for n, d in dtypes.items() if "embeddings" in n)
