"""The training CLI end to end: in-process, except where a process must start fresh (logical CPU
devices are set before TF starts; a run killed with SIGKILL)."""

import contextlib
import io
import json
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--set", "model.hidden_dim=16", "--set", "model.emb_dim=8", "--set", "train.batch_size=8",
         "--set", "data.max_enc_steps=50", "--set", "data.max_dec_steps=12",
         "--set", "train.log_every=5", "--set", "train.eval_batches=2", "--quiet"]


def train_in_process(model_dir, *extra):
    """python -m pgn_tf.train in this process: (exit code, stdout, stderr)."""
    from pgn_tf import train as train_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train_cli.main(["--model_dir", str(model_dir), *SMALL, *extra])
    return code, out.getvalue(), err.getvalue()


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
    from pgn_tf.training.trainer import Trainer

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


@pytest.mark.slow
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
    from pgn_tf.inference.loading import load_model

    _, _, model, path = load_model(str(model_dir))
    assert model.coverage and path.endswith("ckpt-30")


@pytest.mark.slow
def test_a_named_restart_continues_ml_from_the_best_with_a_fresh_optimizer(tmp_path, corpus):
    """train.phase_name: a new name restarts the same objective (the RL study's ML control) from
    the best checkpoint, with a fresh optimizer at this run's learning rate and the step
    counter going on; the same name again is a plain resume."""
    base = ["--train_data", corpus["train"], "--eval_data", corpus["validation"],
            "--set", "train.eval_every=4", "--set", "train.checkpoint_every=2",
            "--set", "train.eval_samples=0"]
    code, out, err = train_in_process(tmp_path, *base, "--set", "train.max_steps=6")
    assert code == 0, err[-2000:]
    restart = [*base, "--set", "train.phase_name=control", "--set", "train.learning_rate=0.03"]
    code, out, err = train_in_process(tmp_path, *restart, "--set", "train.max_steps=9")
    assert code == 0, err[-2000:]
    text = out + err
    assert "continues with a fresh optimizer" in text and "(step 6)" in text, text[-2000:]
    assert "/best/" in text.split("continues with a fresh optimizer", 1)[1].splitlines()[0]
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    iterations = [n for n in reader.get_variable_to_shape_map()
                  if n.startswith("optimizer/") and "iteration" in n]
    assert iterations and reader.get_tensor(iterations[0]) == 3  # fresh: 3 updates, at step 9
    assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 9
    code, out, err = train_in_process(tmp_path, *restart, "--set", "train.max_steps=10")
    assert code == 0 and "resumed from" in out + err and "(step 9)" in out + err


@pytest.mark.slow
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
    # Same size as the model dir's vocab, other words: new ids must not train old rows.
    words = (model_dir / "vocab.txt").read_text().splitlines()
    (tmp_path / "shuffled.txt").write_text("\n".join(words[1:] + words[:1]) + "\n")
    cases = [
        (["--train_data", str(tmp_path / "nope.jsonl")], "does not exist"),
        (["--train_data", str(tmp_path / "empty-*.tfrecord")], "matches no file"),
        (["--train_data", str(bad)], "bad.tfrecord is not a readable TFRecord"),
        (["--train_data", corpus["train"], "--set", "model.hiden_dim=3"], "unknown config key"),
        (["--train_data", corpus["train"], "--set", f"data.vocab_path={tmp_path}/vocab.txt"],
         "checkpoint"),
        (["--train_data", corpus["train"], "--set", "model.hidden_dim=32"], "model.hidden_dim=16"),
        (["--train_data", corpus["train"], "--set", f"data.vocab_path={tmp_path}/shuffled.txt"],
         "differs from the model dir's vocab.txt"),
    ]
    for args, message in cases:
        # the module's model dir was converted to coverage by an earlier test
        code, _, err = train_in_process(model_dir, *args, "--set", "model.coverage=true")
        assert code == 2, err[-2000:]
        lines = [ln for ln in err.splitlines() if ln.startswith("pgn_tf.train: error:")]
        assert len(lines) == 1 and message in lines[0], err[-2000:]
    assert _snapshot(model_dir) == before


@pytest.mark.slow
def test_time_budget_and_bfloat16_mixed_precision(tmp_path, corpus):
    """train.max_minutes stops early (checkpoint and eval at the last step); bf16 compute
    trains with finite, falling losses and leaves float32 variables (under an oneDNN cap that
    would crash bf16 on this CPU, .ci/run's second pass: refused in one line instead)."""
    from tests.training.test_precision_policies import refused_here

    code, out, err = train_in_process(
        tmp_path, "--train_data", corpus["train"], "--eval_data", corpus["validation"],
        "--set", "train.max_steps=100000", "--set", "train.max_minutes=0.1",
        "--set", "train.mixed_precision=mixed_bfloat16", "--set", "train.eval_every=1000")
    if refused_here("mixed_bfloat16"):
        assert code == 2 and "bf16 cannot run under ONEDNN_MAX_CPU_ISA" in err, err[-2000:]
        assert not any(tmp_path.iterdir())
        return
    assert code == 0, err[-2000:]
    result = json.loads((tmp_path / "train_result.json").read_text())
    assert 0 < result["final_step"] < 100000, out[-2000:]
    assert np.isfinite(result["loss"]) and result["eval_loss"] < result["initial_eval_loss"]
    last = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert last.endswith(f"ckpt-{result['final_step']}")
    reader = tf.train.load_checkpoint(last)
    dtypes = reader.get_variable_to_dtype_map()
    assert all(d == tf.float32 for n, d in dtypes.items() if "embeddings" in n)


@pytest.mark.slow
def test_float16_on_the_keras_path_resumes_as_float32_on_the_fused_one(tmp_path, corpus):
    """train.mixed_precision=mixed_float16 (what `auto` picks on a GPU) with Keras's loss
    scaling and model.rnn_impl=keras, forced here on the CPU: finite losses, float32 variables,
    the loss scale checkpointed apart from the optimizer; the same model dir then resumes in
    float32 on the fused path (the same variables) and back, each run logging its choices."""
    common = ["--train_data", corpus["train"], "--set", "train.checkpoint_every=2",
              "--set", "train.optimizer=adam", "--set", "train.learning_rate=0.01"]
    runs = [(4, "keras", "mixed_float16"), (6, "fused", ""), (8, "keras", "mixed_float16")]
    for steps, impl, precision in runs:
        code, out, err = train_in_process(
            tmp_path, *common, "--set", f"train.max_steps={steps}",
            "--set", f"model.rnn_impl={impl}", "--set", f"train.mixed_precision={precision}")
        assert code == 0, err[-2000:]
        scaling = " with loss scaling" if precision else ""
        assert f"model.rnn_impl {impl}; precision {precision or 'float32'}{scaling}" in out
        result = json.loads((tmp_path / "train_result.json").read_text())
        assert result["final_step"] == steps and np.isfinite(result["loss"]), out[-2000:]
        if steps > 4:
            assert "resumed from" in out and f"(step {steps - 2})" in out
        names = dict(tf.train.list_variables(tf.train.latest_checkpoint(str(tmp_path / "ckpt"))))
        assert any(n.startswith("optimizer/_variables/") for n in names)
        assert ("loss_scale/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE" in names) == bool(precision)
    dtypes = tf.train.load_checkpoint(tf.train.latest_checkpoint(
        str(tmp_path / "ckpt"))).get_variable_to_dtype_map()
    assert all(d == tf.float32 for n, d in dtypes.items() if n.startswith("model/"))


def _variables(ckpt_path):
    reader = tf.train.load_checkpoint(ckpt_path)
    return {n: reader.get_tensor(n) for n, _ in tf.train.list_variables(ckpt_path)
            if n.startswith("model/")}


@pytest.mark.slow
def test_xla_compiled_steps_match_the_plain_ones(tmp_path, corpus):
    """train.jit_compile: the same examples, padded to their bucket's bounds, give the same
    weights after a few steps as the plain tf.function step."""
    common = ["--train_data", corpus["train"], "--set", "train.max_steps=3",
              "--set", "train.checkpoint_every=3", "--set", "train.optimizer=adam",
              "--set", "train.learning_rate=0.01"]
    runs = {}
    for jit in ("false", "true"):
        code, _, err = train_in_process(tmp_path / jit, *common, "--set", f"train.jit_compile={jit}")
        assert code == 0, err[-2000:]
        runs[jit] = _variables(tf.train.latest_checkpoint(str(tmp_path / jit / "ckpt")))
        assert json.loads((tmp_path / jit / "train_result.json").read_text())["final_step"] == 3
    assert runs["true"].keys() == runs["false"].keys()
    for name, value in runs["false"].items():
        np.testing.assert_allclose(runs["true"][name], value, rtol=1e-3, atol=1e-5, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("data", [[], ["data.cache_tokens=true",
                                        "data.bucket_by_summary_length=true"]])
def test_resume_continues_the_data_order_and_matches_an_uninterrupted_run(tmp_path, corpus,
                                                                          data):
    """A run stopped at step 6 and resumed to 12 ends where an uninterrupted run to 12 ends:
    same loss at step 12, same variables (the resumed input skips the batches consumed), also
    with the token cache and the summary-length buckets."""
    common = ["--train_data", corpus["train"], "--set", "train.checkpoint_every=6",
              "--set", "train.log_every=1", "--set", "train.optimizer=adam",
              "--set", "train.learning_rate=0.01"]
    for item in data:
        common += ["--set", item]
    code, _, err = train_in_process(tmp_path / "straight", *common, "--set", "train.max_steps=12")
    assert code == 0, err[-2000:]
    straight = json.loads((tmp_path / "straight" / "train_result.json").read_text())
    for steps in (6, 12):
        code, out, err = train_in_process(tmp_path / "resumed", *common,
                                          "--set", f"train.max_steps={steps}")
        assert code == 0, err[-2000:]
    assert "resumed from" in out and "(step 6)" in out
    resumed = json.loads((tmp_path / "resumed" / "train_result.json").read_text())
    assert resumed["final_step"] == straight["final_step"] == 12
    np.testing.assert_allclose(resumed["loss"], straight["loss"], rtol=1e-5)
    a = _variables(str(tmp_path / "straight" / "ckpt" / "ckpt-12"))
    b = _variables(str(tmp_path / "resumed" / "ckpt" / "ckpt-12"))
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_divergence_stops_clearly_and_never_keeps_a_non_finite_best(tmp_path, corpus):
    """train.learning_rate=1e30: non-finite steps are skipped, then the run stops with one
    error line naming the step; the best checkpoint and the latest stay finite."""
    common = ["--train_data", corpus["train"], "--eval_data", corpus["validation"],
              "--set", "train.eval_every=3", "--set", "train.checkpoint_every=3",
              "--set", "train.eval_samples=0"]
    code, _, err = train_in_process(tmp_path, *common, "--set", "train.max_steps=6")
    assert code == 0, err[-2000:]
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert np.isfinite(best["value"])
    code, _, err = train_in_process(tmp_path, *common, "--set", "train.max_steps=100",
                                    "--set", "train.learning_rate=1e30",
                                    "--set", "train.max_nonfinite_steps=4")
    assert code == 2
    line = [ln for ln in err.splitlines() if ln.startswith("pgn_tf.train: error:")]
    assert len(line) == 1 and "diverged" in line[0] and "at step" in line[0], err[-2000:]
    assert json.loads((tmp_path / "best" / "best.json").read_text()) == best
    for ckpt in (tf.train.latest_checkpoint(str(tmp_path / "best")),
                 tf.train.latest_checkpoint(str(tmp_path / "ckpt"))):
        assert all(np.all(np.isfinite(v)) for v in _variables(ckpt).values()), ckpt


@pytest.mark.slow
def test_rouge_selection_and_early_stopping(tmp_path, corpus):
    """train.select_by=rouge keeps the best validation ROUGE; with nothing to learn (rate 1e-12)
    the second evaluation is no better, and patience 1 stops the run there."""
    code, out, err = train_in_process(
        tmp_path, "--train_data", corpus["train"], "--eval_data", corpus["validation"],
        "--set", "train.select_by=rouge", "--set", "train.eval_rouge_examples=16",
        "--set", "train.eval_every=2", "--set", "train.early_stop_patience=1",
        "--set", "train.learning_rate=1e-12", "--set", "train.max_steps=50",
        "--set", "train.eval_samples=0", "--set", "decode.max_dec_steps=8",
        "--set", "decode.min_dec_steps=0")
    assert code == 0, err[-2000:]
    result = json.loads((tmp_path / "train_result.json").read_text())
    assert result["stopped_early"] and result["final_step"] == 4, out[-2000:]
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert best["metric"] == "rouge:rougeLsum" and best["step"] == 2
    assert best["value"] == result["eval_rougeLsum"] and "eval_rouge1" in result


@pytest.mark.parametrize("key, select_by", [("train.eval_skip", "loss"),
                                             ("train.eval_rouge_skip", "rouge")])
def test_selection_pairs_past_the_validation_set_are_one_line_error(tmp_path, corpus, key,
                                                                    select_by):
    """train.eval_skip leaves the first validation pairs to scoring; skipping all of them
    leaves nothing to select by and says so, before any training step (for either measure;
    the old name, eval_rouge_skip, still reads as the new)."""
    code, out, err = train_in_process(
        tmp_path, "--train_data", corpus["train"], "--eval_data", corpus["validation"],
        "--set", f"train.select_by={select_by}", "--set", f"{key}=100000",
        "--set", "train.max_steps=2", "--set", "train.eval_samples=0")
    assert code != 0
    assert "train.eval_skip=100000 skips every validation example" in err
    assert "Traceback" not in err and not (tmp_path / "ckpt").exists()


def test_a_locked_model_dir_and_a_corrupt_record_are_one_line_errors(tmp_path, corpus):
    """A second writer is refused naming the holder's pid; a record whose checksum fails in the
    middle of training stops the run with one line naming the file and byte offset."""
    from pgn_tf.utils.dirlock import DirLock
    from tests.data.test_readers import record_offsets

    with DirLock(str(tmp_path / "locked"), what="model dir"):
        code, _, err = train_in_process(tmp_path / "locked", "--train_data", corpus["train"])
    assert code == 2 and f"is in use by pid {os.getpid()}" in err
    good = sorted(tf.io.gfile.glob(corpus["train"]))[0]
    raw = bytearray(open(good, "rb").read())
    at = record_offsets(good)[150]
    raw[at + 20] ^= 0x55  # inside the record's data: its CRC no longer matches
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(raw))
    code, _, err = train_in_process(tmp_path / "run", "--train_data", str(bad),
                                    "--set", "data.vocab_size=50", "--set", "train.max_steps=200")
    lines = [ln for ln in err.splitlines() if ln.startswith("pgn_tf.train: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert f"{bad} has a corrupt or truncated record at byte offset {at}" in lines[0]


@pytest.mark.slow
def test_export_on_best_writes_the_next_version(tmp_path, corpus):
    base = tmp_path / "serving" / "pgn"
    (base / "7").mkdir(parents=True)  # an older version: the export goes above it
    code, out, err = train_in_process(
        tmp_path / "run", "--train_data", corpus["train"], "--eval_data", corpus["validation"],
        "--set", "train.max_steps=10", "--set", "train.eval_every=10",
        "--set", "train.eval_samples=0", "--set", f"train.export_on_best={base}")
    assert code == 0, err[-2000:]
    assert f"the new best is exported as {base}/8" in out
    best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
    assert best["step"] == 10 and (base / "8" / "saved_model.pb").exists()
    assert sorted(os.listdir(base)) == ["7", "8"]  # nothing half-written left beside them


@pytest.mark.parametrize("setting", ["train.jit_compile=true", "decode.jit_step=true"])
def test_one_replica_xla_settings_are_refused_on_more_replicas(setting, tmp_path):
    """XLA cannot read a mirrored variable from another replica's device: the compiled
    training step and the compiled decoding step (the validation ROUGE's) are refused before
    anything is built."""
    from pgn_tf import config, vocab
    from pgn_tf.model_dir import ModelDir
    from pgn_tf.training.trainer import Trainer
    from pgn_tf.utils.errors import UserError

    class TwoReplicas:  # what the constructor reads of a strategy before it refuses
        num_replicas_in_sync = 2
        cluster_resolver = None

    cfg = config.resolve("tiny", [setting])
    voc = vocab.Vocab(["w"])
    with pytest.raises(UserError, match=f"{setting.split('=')[0]} compiles a one-replica"):
        Trainer(cfg, ModelDir(str(tmp_path)), voc, [], None, TwoReplicas())
