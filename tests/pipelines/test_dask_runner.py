"""The Beam pipelines on Beam's DaskRunner against a dask.distributed cluster whose scheduler and
two workers are separate processes on loopback: the same files and counts as the DirectRunner,
a worker killed mid-run, and the errors a user sees when the cluster cannot run them."""

import contextlib
import dataclasses
import glob
import gzip
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import apache_beam as beam
import pytest

from pgn_tf.data import jsonl, synthetic, tfrecord
from pgn_tf.pipelines import (
    flow,
    portable,
    preprocess,
    preprocessing,
    splits,
    summarize,
    summarizing,
)

STARTUP_S = 120  # a scheduler and workers importing dask (and TF, on a loaded 2-core machine)


# -- the cluster ----------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    address: str
    processes: list  # subprocess.Popen, each the leader of its own process group
    log_dir: str

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30, set_as_default=False)


def poll(check, timeout_s: float, interval_s: float, what: str):
    """check()'s first truthy value, asked every interval_s until timeout_s has passed
    (TimeoutError naming `what`): for state only another process changes."""
    deadline, tick = time.monotonic() + timeout_s, threading.Event()
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        tick.wait(interval_s)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def _scheduler_address(path, proc):
    """The address in the scheduler file, once the scheduler has written it (None before)."""
    if proc.poll() is not None:
        raise RuntimeError(f"dask scheduler exited with {proc.returncode}")
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(path) as f:
            return json.load(f)["address"]
    return None


def start_cluster(root, workers: int = 2, nanny: bool = True, env: dict | None = None):
    """A scheduler and `workers` worker processes on 127.0.0.1, each command its own process
    group (stop_cluster kills the groups: a nanny's workers too). Returns once the workers
    have registered."""
    os.makedirs(root, exist_ok=True)
    deadline = time.monotonic() + STARTUP_S
    sched_file = os.path.join(root, "scheduler.json")
    cluster = Cluster("", [], root)
    child_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    try:
        with open(os.path.join(root, "scheduler.log"), "w") as log:
            cluster.processes.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                 "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file",
                 sched_file], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")))
        cluster.address = poll(lambda: _scheduler_address(sched_file, cluster.processes[0]),
                               STARTUP_S, 0.1, f"the scheduler file {sched_file}")
        with open(os.path.join(root, "workers.log"), "w") as log:
            cluster.processes.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", cluster.address,
                 "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard",
                 "--dashboard-address", "127.0.0.1:0", "--local-directory",
                 os.path.join(root, "scratch"), "--nanny" if nanny else "--no-nanny"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=child_env))
        with cluster.client() as client:
            client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    for proc in reversed(cluster.processes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in reversed(cluster.processes):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        # the group's other members (a nanny's workers) go with SIGTERM; make sure
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("dask")))
    try:
        yield c
    finally:
        stop_cluster(c)


def dask_args(cluster, *more):
    return ["--runner", "DaskRunner", "--dask_client_address", cluster.address,
            "--dask_npartitions", "2", *more]


# -- comparing outputs ----------------------------------------------------------------------


def file_digests(directory, skip=("stats.json",)):
    """{name: sha1} of every file in a directory (hidden temporaries included)."""
    return {name: hashlib.sha1(open(os.path.join(directory, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(directory)) if name not in skip}


def examples(pattern):
    return sorted((e.id, e.article, e.summary) for e in tfrecord.read_tfrecords(pattern))


def without_timing(stats):
    return {k: v for k, v in stats.items()
            if k not in ("seconds", "records_per_sec", "articles_per_sec", "runner")}


def run_preprocess(*argv):
    """`python -m pgn_tf.pipelines.preprocess ARGV` in this process: the stats.json it wrote."""
    assert preprocess.main(list(argv)) == 0
    out = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(out, "stats.json")) as f:
        return json.load(f)


def run_summarize(*argv):
    """The command's flags -> summarize_files (the library call the command makes): its stats."""
    a, beam_args = summarize.build_parser().parse_known_args(list(argv))
    return summarizing.summarize_files(
        a.saved_model, a.input, a.output, fmt=a.format, field=a.field,
        output_field=a.output_field, batch_size=a.batch_size, num_shards=a.num_shards,
        runner=a.runner, beam_args=beam_args)


def jsonl_corpus(root):
    """Gzipped and plain JSONL with everything preprocess counts: malformed, duplicate, empty,
    and a gzip cut short."""
    os.makedirs(root)
    rows = [{"id": f"d{i}", "article": f"the package number {i} does thing {i % 7} well .",
             "summary": f"thing {i % 7} tool"} for i in range(80)]
    rows += [
        "{broken json",
        {"id": "dup", "article": "The package number 3 does thing 3 well.", "summary": "x"},
        {"id": "empty-summary", "article": "a real article .", "summary": "   "},
        {"id": "no-summary", "article": "only an article"},
    ]
    with gzip.open(os.path.join(root, "a.jsonl.gz"), "wt", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    jsonl.write_jsonl(synthetic.generate(60, seed=3), os.path.join(root, "b.jsonl"))
    cut = gzip.compress("".join(json.dumps({"id": f"g{i}", "article": f"gz article {i} " * 30,
                                            "summary": f"gz {i}"}) + "\n"
                                for i in range(200)).encode())
    with open(os.path.join(root, "c.jsonl.gz"), "wb") as f:
        f.write(cut[: len(cut) // 2])
    return os.path.join(root, "*.jsonl*"), ["--format", "jsonl", "--vocab_size", "60",
                                            "--split", "train=0.7,validation=0.2,test=0.1"]


def story_corpus(root):
    """A .story directory split by CNN/DM url lists, with stories no list names."""
    stories = os.path.join(root, "stories")
    lists = os.path.join(root, "url_lists")
    os.makedirs(stories)
    os.makedirs(lists)
    urls = {"train": [], "val": [], "test": []}
    for i, ex in enumerate(synthetic.generate(40, seed=4)):
        url = f"http://www.cnn.com/2015/story-{i}.html"
        if i % 10 != 9:  # every tenth is in no list
            urls[("train", "train", "val", "test")[i % 4]].append(url)
        highlights = "".join(f"\n\n@highlight\n\n{s}" for s in ex.summary.split("\n"))
        name = hashlib.sha1(url.encode()).hexdigest()
        with open(os.path.join(stories, f"{name}.story"), "w") as f:
            f.write(ex.article + highlights + "\n")
    with open(os.path.join(stories, "no-highlight.story"), "w") as f:
        f.write("Just an article.\n")
    for split, fname in (("train", "all_train.txt"), ("val", "all_val.txt"),
                         ("test", "all_test.txt")):
        with open(os.path.join(lists, fname), "w") as f:
            f.write("\n".join(urls[split]) + "\n")
    return stories, ["--format", "story", "--vocab_size", "80", "--split_files", lists]


# -- same outputs on both runners -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("make_corpus", [jsonl_corpus, story_corpus])
def test_preprocess_on_dask_writes_what_the_direct_runner_writes(cluster, tmp_path,
                                                                 make_corpus):
    src, argv = make_corpus(str(tmp_path / "in"))
    direct = run_preprocess("--input", src, "--output_dir", str(tmp_path / "direct"), *argv)
    dask = run_preprocess("--input", src, "--output_dir", str(tmp_path / "dask"), *argv,
                          *dask_args(cluster))
    assert dask["runner"] == "DaskRunner"
    assert without_timing(dask) == without_timing(direct)
    assert direct["read"] == direct["accounted"] and direct["dropped"]  # the counts add up
    assert direct["duplicates"] or "not in any split" in direct["dropped"]
    for split in direct["kept"]:
        got = examples(str(tmp_path / "dask" / f"{split}-*.tfrecord"))
        assert got == examples(str(tmp_path / "direct" / f"{split}-*.tfrecord"))
        assert len(got) == direct["kept"][split]
    # The same files, byte for byte: shards, vocab.txt, counts.json (no leftovers either).
    assert file_digests(tmp_path / "dask") == file_digests(tmp_path / "direct")
    assert (tmp_path / "dask" / "vocab.txt").read_text().count("\n") > 10


@pytest.mark.slow
def test_batch_summarize_on_dask_survives_a_killed_worker(cluster, exported, corpus, tmp_path):
    _, _, path = exported
    articles = [e.article for e in tfrecord.read_tfrecords(corpus["validation"])][:20]
    src = tmp_path / "in"
    src.mkdir()
    with gzip.open(src / "part-1.jsonl.gz", "wt", encoding="utf-8") as f:
        for i, a in enumerate(articles[:12]):
            f.write(json.dumps({"id": f"p1-{i}", "article": a}) + "\n")
    with open(src / "part-2.jsonl", "w", encoding="utf-8") as f:
        for i, a in enumerate(articles[12:]):
            f.write(json.dumps({"id": f"p2-{i}", "article": a}) + "\n")
        f.write('{"id": "oops"}\n')
    argv = ["--saved_model", path, "--input", str(src / "part-*"), "--batch_size", "4"]
    direct = run_summarize(*argv, "--output", str(tmp_path / "direct" / "s"))
    assert direct == {**direct, "lines": 21, "records": 20, "bad lines": 1, "summaries": 20}
    dask = run_summarize(*argv, "--output", str(tmp_path / "dask" / "s"), *dask_args(cluster))
    assert without_timing(dask) == without_timing(direct)
    assert file_digests(tmp_path / "dask") == file_digests(tmp_path / "direct")

    # A worker SIGKILLed while it runs a task of the job: the scheduler sees it go, runs its
    # tasks again on the other worker (the nanny starts a new one), and the job writes the same
    # files, counted the same (counts are data, not counters a retry could double).
    with cluster.client() as client:
        pids = client.run(os.getpid)
        killed = []
        watching = threading.Event()

        def kill_first_busy_worker():
            watching.set()
            busy = poll(lambda: [w for w, tasks in client.processing().items()
                                 if tasks and w in pids], 300, 0.02, "a worker running a task")
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(busy[0])

        killer = threading.Thread(target=kill_first_busy_worker, daemon=True)
        killer.start()
        watching.wait(10)
        again = run_summarize(*argv, "--output", str(tmp_path / "killed" / "s"),
                              *dask_args(cluster))
        killer.join(timeout=300)
        assert killed, "no task was seen running"
        assert without_timing(again) == without_timing(direct)
        assert file_digests(tmp_path / "killed") == file_digests(tmp_path / "direct")
        client.wait_for_workers(2, timeout=STARTUP_S)  # the nanny replaced it
        assert killed[0] not in client.nthreads()


@pytest.mark.slow
def test_the_flows_preprocess_step_takes_the_dask_runner(cluster, tmp_path):
    src, _ = jsonl_corpus(str(tmp_path / "in"))
    inputs = {"input": src, "format": "jsonl", "vocab_size": 50, "min_count": 1,
              "split": "train=0.8,validation=0.2"}
    os.makedirs(tmp_path / "direct")
    os.makedirs(tmp_path / "dask")
    direct = flow.preprocess_step(dict(inputs, beam_args=[]), str(tmp_path / "direct"))
    dask = flow.preprocess_step(dict(inputs, beam_args=dask_args(cluster)),
                                str(tmp_path / "dask"))
    assert without_timing(dask["stats"]) == without_timing(direct["stats"])
    assert file_digests(tmp_path / "dask") == file_digests(tmp_path / "direct")


# -- what the user sees when the cluster cannot run it --------------------------------------


def one_error_line(capsys, prog):
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(prog)]
    assert len(err) == 1, err
    return err[0]


def small_jsonl(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    jsonl.write_jsonl(synthetic.generate(30, seed=1), str(path))
    return str(path)


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--input", small_jsonl(tmp_path), "--format", "jsonl", "--output_dir",
            str(tmp_path / "out"), "--runner", "DaskRunner", "--dask_client_address",
            f"127.0.0.1:{port}", "--dask_connection_timeout", "2"]
    assert preprocess.main(argv) == 2
    line = one_error_line(capsys, "pgn_tf.pipelines.preprocess: error:")
    assert f"preprocess on DaskRunner: cannot reach the dask scheduler at 127.0.0.1:{port}" in line
    assert not (tmp_path / "out" / "stats.json").exists()


def test_dask_options_without_the_dask_runner_are_refused(tmp_path, capsys):
    argv = ["--input", small_jsonl(tmp_path), "--format", "jsonl", "--output_dir",
            str(tmp_path / "out"), "--dask_client_address", "127.0.0.1:1"]
    assert preprocess.main(argv) == 2
    assert "--dask_client_address is a DaskRunner option" in one_error_line(
        capsys, "pgn_tf.pipelines.preprocess: error:")


@pytest.mark.slow
def test_a_worker_without_pgn_tf_is_named_before_the_run(tmp_path, capsys):
    """Such a worker cannot unpickle the pipeline's functions: it closes, and the DaskRunner
    would wait forever. The check before the run names it."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n\n\nclass NoPgnTf:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pgn_tf' or name.startswith('pgn_tf.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n\n\n"
        "sys.meta_path.insert(0, NoPgnTf())\n")
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH")) if p)
    c = start_cluster(str(tmp_path / "dask"), workers=1, env={"PYTHONPATH": path})
    try:
        argv = ["--input", small_jsonl(tmp_path), "--format", "jsonl", "--output_dir",
                str(tmp_path / "out"), "--runner", "DaskRunner", "--dask_client_address",
                c.address]
        assert preprocess.main(argv) == 2
        line = one_error_line(capsys, "pgn_tf.pipelines.preprocess: error:")
        assert "preprocess on DaskRunner: worker tcp://127.0.0.1:" in line
        assert "cannot import pgn_tf (ModuleNotFoundError: No module named 'pgn_tf')" in line
    finally:
        stop_cluster(c)


@pytest.mark.slow
def test_a_cluster_left_without_workers_ends_the_run(tmp_path, capsys):
    """One worker, no nanny to restart it, killed mid-run: the DaskRunner alone would wait for
    a worker forever; the run ends after --dask_connection_timeout with one line."""
    c = start_cluster(str(tmp_path / "dask"), workers=1, nanny=False)
    try:
        with c.client() as client:
            (pid,) = client.run(os.getpid).values()

            def kill_when_busy():
                poll(lambda: any(client.processing().values()), 300, 0.02, "a running task")
                os.kill(pid, signal.SIGKILL)

            killer = threading.Thread(target=kill_when_busy, daemon=True)
            killer.start()
            argv = ["--input", small_jsonl(tmp_path), "--format", "jsonl", "--output_dir",
                    str(tmp_path / "out"), "--runner", "DaskRunner", "--dask_client_address",
                    c.address, "--dask_connection_timeout", "3"]
            assert preprocess.main(argv) == 2
            killer.join(timeout=300)
        line = one_error_line(capsys, "pgn_tf.pipelines.preprocess: error:")
        assert "preprocess on DaskRunner: the dask cluster has had no worker for 3 s" in line
    finally:
        stop_cluster(c)


# -- the graph uses only what the DaskRunner runs faithfully ----------------------------------


class _Graph(beam.pipeline.PipelineVisitor):
    def __init__(self):
        self.produced, self.consumed, self.side_inputs, self.multi_output = {}, set(), [], []

    def visit_transform(self, node):
        for pcoll in node.outputs.values():
            self.produced[pcoll] = node.full_label
        self.consumed.update(node.main_inputs.values())
        self.side_inputs += [node.full_label for _ in node.side_inputs]
        if len(node.outputs) > 1:
            self.multi_output.append(node.full_label)


def graph_of(build_fn):
    p = beam.Pipeline()
    build_fn(p)
    graph = _Graph()
    p.visit(graph)
    return graph


@pytest.mark.parametrize("pipeline", ["preprocess", "summarize"])
def test_every_branch_feeds_the_last_step_and_no_step_has_side_or_tagged_outputs(tmp_path,
                                                                                 pipeline):
    """Beam's DaskRunner computes only the last step's graph, routes a step's tagged outputs to
    every consumer and recomputes side inputs inside the task reading them: the pipelines'
    graphs have one leaf (the counts writer), no multi-output step and no side input."""
    if pipeline == "preprocess":
        graph = graph_of(lambda p: preprocessing.build(
            p, str(tmp_path / "*.jsonl"), "jsonl", str(tmp_path), 50,
            splits.HashSplit([("train", 0.8), ("validation", 0.2)]),
            ["train", "validation"]))
    else:
        handler = summarizing.SavedModelHandler(str(tmp_path), 4)
        graph = graph_of(lambda p: summarizing.build(
            p, str(tmp_path / "*.jsonl"), None, "article", "summary", str(tmp_path / "s"),
            handler, 1))
    leaves = sorted({label for pcoll, label in graph.produced.items()
                     if pcoll not in graph.consumed})
    assert leaves == ["WriteCounts/Write/Write"]  # after every other writer
    assert graph.side_inputs == [] and graph.multi_output == []


def test_write_shards_writes_every_shard_sorted_and_counts_records(tmp_path):
    records = [("t", f"k{i}", f"line {i}".encode()) for i in (5, 1, 9, 3)]
    files = {"t": portable.Files(str(tmp_path / "t"), ".txt", 3, "text", "lines"),
             "u": portable.Files(str(tmp_path / "u"), ".txt", None, "text", "u lines")}
    with beam.Pipeline() as p:
        _ = (p | beam.Create(records)
             | portable.WriteShards(files)
             | beam.Map(lambda c: (c.name, c.n))
             | beam.CombinePerKey(sum)
             | beam.combiners.ToDict()
             | beam.Map(lambda d: (tmp_path / "count").write_text(json.dumps(d))))
    names = sorted(os.listdir(tmp_path))
    assert names == ["count", *[f"t-0000{i}-of-00003.txt" for i in range(3)], "u.txt"]
    lines = [(tmp_path / n).read_text().splitlines() for n in names[1:4]]
    assert sorted(x for shard in lines for x in shard) == sorted(r.decode() for *_, r in records)
    assert all(shard == sorted(shard) for shard in lines)  # by key within a shard
    assert (tmp_path / "u.txt").read_text() == ""  # a file set with no record is still written
    assert json.loads((tmp_path / "count").read_text()) == {"lines": 4, "u lines": 0}
    assert not glob.glob(str(tmp_path / ".tmp-*"))
