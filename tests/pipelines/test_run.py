"""The preprocess -> train -> export -> evaluate -> bless -> push flow, end to end, with a live
server that picks up the pushed version."""

import json
import logging
import os
import time

import pytest
import yaml

from pgn_tf.data import jsonl, synthetic
from pgn_tf.pipelines import flow
from pgn_tf.pipelines import push as push_lib
from pgn_tf.pipelines import run as flow_command


def write_config(tmp_path, name, corpus, serving_base, max_steps, margin):
    cfg = {
        "run_dir": str(tmp_path / name),
        "preprocess": {"input": corpus, "format": "jsonl", "vocab_size": 200,
                       "split": "train=0.85,validation=0.15"},
        "train": {"config": "tiny", "set": [
            f"train.max_steps={max_steps}", "train.eval_every=100", "train.checkpoint_every=100",
            "train.eval_samples=0", "model.hidden_dim=32", "model.emb_dim=16",
            "data.max_enc_steps=60", "data.max_dec_steps=14", "decode.max_dec_steps=16"]},
        "evaluate": {"limit": 40, "batch_size": 40},
        "bless": {"margin": margin},
        "push": {"serving_base": serving_base},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.slow
def test_flow_pushes_only_better_models_and_skips_finished_steps(tmp_path, capsys):
    from pgn_tf.serving.client import summarize
    from pgn_tf.serving.service import Server

    corpus = str(tmp_path / "corpus.jsonl.gz")
    jsonl.write_jsonl(synthetic.generate(360, seed=5), corpus)
    serving_base = str(tmp_path / "serving" / "pgn")
    server = Server({"pgn": (serving_base, 1)}, port=0, rest_port=None, poll_seconds=0.2)
    try:
        # 1. Nothing is served yet: the candidate is compared with lead-8; a negative margin
        # makes this first push independent of how good 120 tiny steps are.
        first = write_config(tmp_path, "run1", corpus, serving_base, 120, -100.0)
        assert flow_command.main(["--config", first]) == 0
        out = capsys.readouterr().out
        assert '"baseline": "lead8w"' in out and "push: version 1" in out
        assert flow.served_versions(serving_base) == [1]
        assert not [d for d in os.listdir(serving_base) if d.startswith(".")]  # no leftovers
        deadline = time.time() + 60
        while server.registry.models["pgn"].get() is None and time.time() < deadline:
            time.sleep(0.2)
        article = synthetic.generate(1, seed=77)[0].article
        assert summarize(f"127.0.0.1:{server.port}", "pgn", [article])[0]  # served, no restart

        # 2. Running the same config again redoes nothing.
        assert flow_command.main(["--config", first]) == 0
        out = capsys.readouterr().out
        assert out.count("done earlier, skipped") == 6 and "running" not in out

        # 3. A model trained for 2 steps is no better than the served one: not pushed.
        second = write_config(tmp_path, "run2", corpus, serving_base, 2, 0.0)
        assert flow_command.main(["--config", second]) == 0
        out = capsys.readouterr().out
        verdict = json.loads((tmp_path / "run2" / "bless" / "_COMPLETE.json").read_text())
        assert verdict["outputs"]["blessed"] is False
        assert verdict["outputs"]["baseline_version"] == 1
        assert "not blessed, nothing pushed" in out
        assert flow.served_versions(serving_base) == [1]
    finally:
        server.stop()


@pytest.mark.slow
def test_resumes_a_run_killed_after_training(tmp_path, monkeypatch):
    """A failure in a later step leaves the finished steps alone: the next run skips them."""
    corpus = str(tmp_path / "corpus.jsonl.gz")
    jsonl.write_jsonl(synthetic.generate(120, seed=6), corpus)
    cfg = flow.load_config(write_config(tmp_path, "r", corpus, str(tmp_path / "s"), 3, 0.0))

    def boom(inputs, out_dir):
        raise RuntimeError("killed")

    monkeypatch.setattr(flow, "export_step", boom)
    with pytest.raises(RuntimeError, match="killed"):
        flow.run(cfg)
    monkeypatch.undo()
    before = json.loads((tmp_path / "r" / "train" / "_COMPLETE.json").read_text())
    out = flow.run(cfg)
    after = json.loads((tmp_path / "r" / "train" / "_COMPLETE.json").read_text())
    assert before == after and out["export"]["saved_model"].endswith(os.path.join("model", "1"))


@pytest.mark.parametrize("text, message", [
    ("run_dir: x\n", "needs preprocess.input"),
    ("preprocess: {input: a, nope: 1}\npush: {serving_base: b}\n", "unknown key(s) in 'preprocess'"),
    ("bogus: 1\n", "unknown pipeline config key 'bogus'"),
])
def test_bad_config_is_a_one_line_error(tmp_path, capsys, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert flow_command.main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_preprocess_step_reruns_when_its_input_data_changes(tmp_path, caplog):
    """The same config over new data is not skipped: the files' names, sizes and mtimes are in
    the step's fingerprint. (The step body is a recorder: what is tested is the runner.)"""
    caplog.set_level(logging.INFO, logger="pgn_tf")  # the flow logs its steps
    data = tmp_path / "data"
    data.mkdir()
    jsonl.write_jsonl(synthetic.generate(5, seed=1), str(data / "a.jsonl"))
    pre = dict(flow.DEFAULTS["preprocess"], input=str(data / "*.jsonl"))
    calls = []

    def step(inputs, out_dir):
        calls.append(inputs["data"])
        return {}

    def run_once():
        return flow.run_step(str(tmp_path / "run"), "preprocess", step, flow.preprocess_inputs(pre))

    run_once()
    run_once()
    assert len(calls) == 1 and calls[0]["files"] == 1  # unchanged: skipped
    with open(data / "a.jsonl", "a") as f:  # the same file, one more record
        f.write('{"article": "x y", "summary": "x"}\n')
    run_once()
    assert len(calls) == 2 and "preprocess: data changed, running again" in caplog.text
    jsonl.write_jsonl(synthetic.generate(2, seed=2), str(data / "b.jsonl"))  # a new file
    run_once()
    assert len(calls) == 3 and calls[-1]["files"] == 2
    stat = os.stat(data / "b.jsonl")
    os.utime(data / "b.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # rewritten
    run_once()
    run_once()
    assert len(calls) == 4


def fake_saved_model(path):
    """Push copies a directory whatever it holds; a real export is not needed to test it."""
    os.makedirs(os.path.join(path, "variables"))
    for name, data in (("saved_model.pb", b"graph"), ("variables/variables.index", b"idx")):
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    return str(path)


def test_push_killed_after_its_rename_does_not_push_again(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="pgn_tf")  # the flow logs its steps
    serving_base = str(tmp_path / "serving")
    inputs = {"after": "x", "saved_model": fake_saved_model(tmp_path / "export"),
              "blessed": True, "serving_base": serving_base}

    def killed(path, record):
        raise RuntimeError("killed between the push rename and _COMPLETE.json")

    monkeypatch.setattr(flow, "write_marker", killed)
    with pytest.raises(RuntimeError, match="killed"):
        flow.run_step(str(tmp_path / "run"), "push", flow.push_step, inputs)
    monkeypatch.undo()
    assert flow.served_versions(serving_base) == [1]
    assert not (tmp_path / "run" / "push" / flow.COMPLETE).exists()

    out = flow.run_step(str(tmp_path / "run"), "push", flow.push_step, inputs)
    assert out["version"] == 1 and flow.served_versions(serving_base) == [1]
    assert "not pushed again" in caplog.text
    pushed = json.loads((tmp_path / "serving" / "1" / flow.PUSHED_BY).read_text())
    assert pushed["push_id"] == flow.fingerprint(inputs)
    assert (tmp_path / "serving" / "1" / "saved_model.pb").read_bytes() == b"graph"

    # Another run's push (another fingerprint) is a new version.
    other = dict(inputs, after="y")
    assert flow.run_step(str(tmp_path / "run2"), "push", flow.push_step, other)["version"] == 2
    assert flow.served_versions(serving_base) == [1, 2]


def test_push_killed_before_its_rename_leaves_nothing_and_leftovers_are_cleaned(
        tmp_path, monkeypatch):
    import socket

    serving_base = tmp_path / "serving"
    saved_model = fake_saved_model(tmp_path / "export")

    def killed(tmp, final):
        raise OSError("killed before the rename")

    monkeypatch.setattr(push_lib, "publish", killed)
    with pytest.raises(OSError, match="killed"):
        flow.push(saved_model, str(serving_base), "id")
    monkeypatch.undo()
    assert os.listdir(serving_base) == []  # the half copy went with the exception

    # What a SIGKILLed run leaves: half copies in serving_base and temporaries in run_dir.
    dead = subprocess_pid_that_exited()
    host = socket.gethostname()
    stale = [serving_base / f".push-{dead}-1-{host}", serving_base / f".push-{dead}-2"]
    live = [serving_base / f".push-{os.getpid()}-3-{host}",  # a push under way
            serving_base / f".push-{dead}-4-elsewhere.example"]  # cannot be checked from here
    run_dir = tmp_path / "run"
    temps = [run_dir / "export" / "model" / f".tmp-1-{dead}", run_dir / "train" / "config.json.tmp",
             run_dir / "push" / (flow.COMPLETE + ".tmp")]
    kept = [run_dir / "train" / "config.json", run_dir / "export" / "model" / "1" / "x.pb"]
    for path in stale + live + temps[:1]:
        path.mkdir(parents=True)
    for path in temps[1:] + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    removed = flow.clean_leftovers(str(run_dir), str(serving_base))
    assert sorted(removed) == sorted(str(p) for p in stale + temps)
    assert all(p.exists() for p in live + kept) and not any(p.exists() for p in stale + temps)


def subprocess_pid_that_exited():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_run_on_a_locked_run_dir_is_refused(tmp_path, capsys):
    from pgn_tf.utils.dirlock import DirLock

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"),
                                    "preprocess": {"input": str(tmp_path / "none.jsonl")},
                                    "push": {"serving_base": str(tmp_path / "serving")}}))
    with DirLock(str(tmp_path / "run"), "pipeline run dir"):
        assert flow_command.main(["--config", str(path)]) == 2
        assert os.listdir(tmp_path / "run") == [".lock"]  # nothing else was written
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pgn_tf.pipelines.run: error: pipeline run dir {tmp_path / 'run'} is in "
                          f"use "
                          f"by pid {os.getpid()} (started ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("beam_args, runner, rest", [
    ([], "DirectRunner", []),
    (["--runner", "DaskRunner", "--dask_client_address", "h:1"], "DaskRunner",
     ["--dask_client_address", "h:1"]),
    (["--dask_npartitions", "2", "--runner=DaskRunner"], "DaskRunner", ["--dask_npartitions", "2"]),
])
def test_the_preprocess_steps_runner_is_taken_from_its_beam_args(beam_args, runner, rest):
    assert flow.split_runner(beam_args) == (runner, rest)
