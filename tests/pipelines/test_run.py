"""The preprocess -> train -> export -> evaluate -> bless -> push flow, end to end, with a live
server that picks up the pushed version."""

import json
import os
import time

import pytest
import yaml

from pgn_tf.data import jsonl, synthetic
from pipelines import run as flow


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


def test_flow_pushes_only_better_models_and_skips_finished_steps(tmp_path, capsys):
    from serving.client import summarize
    from serving.server import Server

    corpus = str(tmp_path / "corpus.jsonl.gz")
    jsonl.write_jsonl(synthetic.generate(360, seed=5), corpus)
    serving_base = str(tmp_path / "serving" / "pgn")
    server = Server({"pgn": (serving_base, 1)}, port=0, rest_port=None, poll_seconds=0.2)
    try:
        # 1. Nothing is served yet: the candidate is compared with lead-8; a negative margin
        # makes this first push independent of how good 250 tiny steps are.
        first = write_config(tmp_path, "run1", corpus, serving_base, 250, -100.0)
        assert flow.main(["--config", first]) == 0
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
        assert flow.main(["--config", first]) == 0
        out = capsys.readouterr().out
        assert out.count("done earlier, skipped") == 6 and "running" not in out

        # 3. A model trained for 2 steps is no better than the served one: not pushed.
        second = write_config(tmp_path, "run2", corpus, serving_base, 2, 0.0)
        assert flow.main(["--config", second]) == 0
        out = capsys.readouterr().out
        verdict = json.loads((tmp_path / "run2" / "bless" / "_COMPLETE.json").read_text())
        assert verdict["outputs"]["blessed"] is False
        assert verdict["outputs"]["baseline_version"] == 1
        assert "not blessed, nothing pushed" in out
        assert flow.served_versions(serving_base) == [1]
    finally:
        server.stop()


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
    assert flow.main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
