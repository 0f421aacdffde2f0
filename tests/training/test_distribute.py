"""MultiWorkerMirroredStrategy for real: two worker processes on 127.0.0.1 under TF_CONFIG train
one model; one worker is killed mid-run and restarted, as a cluster manager (Kubernetes with
restartPolicy OnFailure) would restart it, and the run finishes from the last checkpoint."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_STEPS = 16
DEADLINE_S = 600  # the whole test; each wait below is bounded by it

# A worker process: `python -m pgn_tf.train ARGS`, and at the end of training it dumps the
# model variables it holds (its own replica, not the chief's checkpoint) to DUMP.npz, in the
# order of model.weights (names differ between processes; the order does not).
WORKER = """
import sys
import numpy as np
from pgn_tf import train
from pgn_tf.training import loop
fit = loop.fit
def fit_and_dump(trainer, verbose=1):
    result = fit(trainer, verbose)
    np.savez(sys.argv[1], *[v.numpy() for v in trainer.model.weights])
    return result
loop.fit = fit_and_dump
sys.exit(train.main(sys.argv[2:]))
"""


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write_jsonl(path, examples):
    with open(path, "w") as f:
        for e in examples:
            f.write(json.dumps({"article": e.article, "summary": e.summary, "id": e.id}) + "\n")


class Cluster:
    """Worker processes of one TF_CONFIG cluster; every start gets its own log and TMPDIR."""

    def __init__(self, tmp_path, args):
        self.tmp, self.args = tmp_path, args
        self.ports = _free_ports(2)
        self.procs, self.runs = {}, {0: [], 1: []}  # task -> [(proc, log, tmpdir)]

    def start(self, task):
        n = len(self.runs[task])
        log = self.tmp / f"worker{task}.{n}.log"
        tmpdir = self.tmp / f"tmp{task}.{n}"
        tmpdir.mkdir()
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in self.ports]},
                     "task": {"type": "worker", "index": task}}
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT,
                   TF_CONFIG=json.dumps(tf_config), TMPDIR=str(tmpdir))
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(self.tmp / f"vars{task}.npz"), *self.args],
                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.procs[task] = proc
        self.runs[task].append((proc, log, tmpdir))
        return proc

    def kill_all(self):
        for proc, _, _ in self.runs[0] + self.runs[1]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def _checkpoint_step(ckpt_dir):
    latest = tf.train.latest_checkpoint(str(ckpt_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _events_pids(model_dir):
    """pid of the writer of every TensorBoard events file (events.out.tfevents.T.HOST.PID.N.v2)."""
    return {int(name.split(".")[-3]) for _, _, files in os.walk(model_dir) for name in files
            if name.startswith("events.out.tfevents.")}


class _Strategy:
    """What worker_role reads of a strategy: its cluster resolver (a real TF resolver)."""

    def __init__(self, cluster, task_type=None, task_id=None):
        self.cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id)


def test_the_chief_is_task_chief_or_worker_zero():
    from pgn_tf.training.distribute import worker_role

    two = {"worker": ["h:1", "h:2"]}
    assert worker_role(_Strategy(two, "worker", 0)) == (True, 2)
    assert worker_role(_Strategy(two, "worker", 1)) == (False, 2)
    with_chief = {"chief": ["h:0"], "worker": ["h:1", "h:2"]}
    assert worker_role(_Strategy(with_chief, "chief", 0)) == (True, 3)
    assert worker_role(_Strategy(with_chief, "worker", 0)) == (False, 3)
    assert worker_role(_Strategy({})) == (True, 1)
    assert worker_role(tf.distribute.get_strategy()) == (True, 1)


@pytest.mark.parametrize("tf_config, expected", [
    ("{not json", "TF_CONFIG must be JSON"),
    ('{"cluster": {"worker": ["h:1"]}}', "TF_CONFIG must be JSON"),
    ('{"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 0}}', "task type 'ps'"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}',
     "task worker:1 is not in its cluster (worker: 1)"),
])
def test_a_bad_tf_config_is_one_line_before_anything_is_written(tmp_path, monkeypatch,
                                                                 capsys, tf_config, expected):
    from pgn_tf import train

    monkeypatch.setenv("TF_CONFIG", tf_config)
    code = train.main(["--strategy", "multi_worker", "--model_dir", str(tmp_path / "m")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0], err
    assert err[0].startswith("pgn_tf.train: error: ")
    assert not (tmp_path / "m").exists()


def test_other_workers_never_convert_the_data_themselves(tmp_path):
    from pgn_tf.data import dataset, synthetic

    _write_jsonl(tmp_path / "train.jsonl", synthetic.generate(5, seed=0))
    cache = str(tmp_path / "cache")
    with pytest.raises(ValueError, match="cache .* is missing; every worker must see the same"):
        dataset.resolve_files(str(tmp_path / "train.jsonl"), cache, convert=False)
    assert not os.path.exists(cache)
    files = dataset.resolve_files(str(tmp_path / "train.jsonl"), cache)  # the chief converts
    assert dataset.resolve_files(str(tmp_path / "train.jsonl"), cache, convert=False) == files


def test_a_lost_peer_is_named_in_one_line():
    from pgn_tf.training.run import _first_line

    graph_error = ("Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at "
                   "(most recent call last):\n  File \"loop.py\", line 9, in fit\n    step()\n\n"
                   "Collective ops is aborted by: recvmsg:Connection reset by peer\nThe error "
                   "could be from a previous operation.\n\t [[{{node CollectiveReduceV2}}]]")
    assert _first_line(graph_error) == "Collective ops is aborted by: recvmsg:Connection reset by peer"
    eager_error = ("{{function_node __wrapped__CollectiveReduceV2}} Collective ops is aborted by: "
                   "The following tasks are unhealthy (stopped sending heartbeats):\n"
                   "/job:worker/replica:0/task:1\nThe tasks have crashed.")
    assert _first_line(eager_error) == (
        "Collective ops is aborted by: The following tasks are unhealthy (stopped sending "
        "heartbeats): /job:worker/replica:0/task:1")


@pytest.mark.slow
def test_two_workers_survive_a_killed_worker_and_agree(tmp_path):
    from pgn_tf.data import synthetic

    examples = synthetic.generate(260, seed=0)
    _write_jsonl(tmp_path / "train.jsonl", examples[:220])
    _write_jsonl(tmp_path / "valid.jsonl", examples[220:])
    model_dir = tmp_path / "model"
    args = ["--strategy", "multi_worker", "--model_dir", str(model_dir), "--quiet",
            "--train_data", str(tmp_path / "train.jsonl"),
            "--eval_data", str(tmp_path / "valid.jsonl"),
            "--set", "model.hidden_dim=16", "--set", "model.emb_dim=8",
            "--set", "train.batch_size=8", "--set", "data.max_enc_steps=50",
            "--set", "data.max_dec_steps=12", "--set", f"train.max_steps={MAX_STEPS}",
            "--set", "train.checkpoint_every=4", "--set", "train.log_every=4",
            "--set", "train.eval_every=100", "--set", "train.eval_batches=1",
            "--set", "train.eval_samples=0",
            # A learning rate that follows the clock: the workers agree only if every one takes
            # the chief's clock (else their variables part ways, checked below).
            "--set", "train.lr_schedule=cosine", "--set", "train.max_minutes=10"]
    cluster = Cluster(tmp_path, args)
    deadline = time.monotonic() + DEADLINE_S
    try:
        cluster.start(0)
        cluster.start(1)
        # Kill the non-chief worker once the chief has checkpointed mid-run.
        while _checkpoint_step(model_dir / "ckpt") < 8:
            assert time.monotonic() < deadline, "no checkpoint at step 8 in time"
            assert all(p.poll() is None for p in cluster.procs.values()), \
                "a worker exited before the kill"
            time.sleep(0.5)
        killed_at = _checkpoint_step(model_dir / "ckpt")
        assert killed_at < MAX_STEPS, "training finished before the kill: raise MAX_STEPS"
        cluster.procs[1].send_signal(signal.SIGKILL)
        cluster.procs[1].wait(timeout=30)
        cluster.start(1)
        # Supervise: a worker that exits with an error is restarted (at most twice each); the
        # chief loses its peer and stops within TF's heartbeat timeout.
        while not all(p.poll() == 0 for p in cluster.procs.values()):
            assert time.monotonic() < deadline, "the cluster did not finish in time"
            for task, proc in list(cluster.procs.items()):
                if proc.poll() not in (None, 0):
                    assert len(cluster.runs[task]) < 3, (
                        f"worker {task} keeps failing:\n"
                        + cluster.runs[task][-1][1].read_text()[-3000:])
                    cluster.start(task)
            time.sleep(0.5)
    finally:
        cluster.kill_all()

    # A chief that lost its peer said so in one line and how to go on (TF's own C++ log lines
    # may follow it on stderr while the process shuts down).
    for _, log, _ in cluster.runs[0][:-1]:
        errors = [line for line in log.read_text().splitlines()
                  if line.startswith("pgn_tf.train: error: ")]
        assert len(errors) == 1, log.read_text()[-3000:]
        assert errors[0].startswith("pgn_tf.train: error: a worker of the cluster stopped (")
        assert "restart the workers that exited" in errors[0]
    # The restarted run resumed from the checkpoint the kill left, and reached the end.
    final_logs = {task: cluster.runs[task][-1][1].read_text() for task in (0, 1)}
    for text in final_logs.values():
        assert "[pgn_tf] resumed from" in text and "2 replica(s)" in text
    result = json.loads((model_dir / "train_result.json").read_text())
    assert result["final_step"] == MAX_STEPS and result["steps"] < MAX_STEPS

    # Both workers end with the same variables, and they are the chief's last checkpoint.
    w0, w1 = np.load(tmp_path / "vars0.npz"), np.load(tmp_path / "vars1.npz")
    from pgn_tf.model_dir import ModelDir

    _, _, model, path = ModelDir(str(model_dir)).load_model("latest")
    assert path.endswith(f"ckpt-{MAX_STEPS}")
    assert len(w0.files) == len(w1.files) == len(model.weights) > 5
    for i, v in enumerate(model.weights):
        np.testing.assert_array_equal(w0[f"arr_{i}"], w1[f"arr_{i}"], err_msg=v.path)
        np.testing.assert_array_equal(v.numpy(), w0[f"arr_{i}"], err_msg=v.path)

    # One set of files in the model dir, all written by the chief.
    assert sorted(os.listdir(model_dir)) == sorted(
        ["best", "ckpt", "config.json", "data", "eval", "train", "train_result.json",
         "vocab.txt"])
    ckpts = {f.split(".")[0] for f in os.listdir(model_dir / "ckpt") if f != "checkpoint"}
    assert ckpts <= {f"ckpt-{s}" for s in range(4, MAX_STEPS + 1, 4)}, ckpts
    assert f"ckpt-{MAX_STEPS}" in ckpts
    assert os.listdir(model_dir / "best") and (model_dir / "best" / "best.json").exists()
    cached = sorted(os.listdir(model_dir / "data"))
    assert len(cached) == 4 and sum(f.endswith(".done") for f in cached) == 2, cached
    chief_pids = {proc.pid for proc, _, _ in cluster.runs[0]}
    assert _events_pids(model_dir) and _events_pids(model_dir) <= chief_pids
    # The non-chief's checkpoint copies went to its temporary directory and were removed.
    assert not os.listdir(cluster.runs[1][-1][2])
