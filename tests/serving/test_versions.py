"""Version lifecycle: policies, labels, dir names, retries, warm-up, and swaps that free memory.
Tiny real SavedModels (tests/serving/helpers.py) keep each load to a fraction of a second."""

import gc
import os
import shutil
import threading
import time
import weakref

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    prediction_log_pb2,
)

from pgn_tf.serving import models
from pgn_tf.serving.batching import BatchingParameters
from pgn_tf.serving.models import LoadedVersion, ModelSpec, ServedModel
from pgn_tf.serving.service import Server
from tests.serving.helpers import (
    add_version,
    request,
    rest,
    stub,
    summaries,
    wait_until,
)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_twenty_swaps_under_load_keep_memory_and_threads_flat(heavy_tiny_model, tmp_path):
    """Each version holds a 16 MB weight: a version kept after its swap would add 16 MB."""
    base = str(tmp_path / "m")
    add_version(base, 1, heavy_tiny_model)
    batching = BatchingParameters(max_batch_size=8, batch_timeout_micros=1000,
                                  max_enqueued_batches=64, num_batch_threads=2)
    srv = Server({"m": base}, rest_port="auto", poll_seconds=0, batching=batching)
    stop, failures, answered = threading.Event(), [], [0]

    def grpc_client():
        s = stub(srv)
        while not stop.is_set():
            try:
                assert summaries(s.Predict(request({"articles": ["x"]}, name="m"),
                                           timeout=30)) == ["x"]
                answered[0] += 1
            except grpc.RpcError as e:
                failures.append(e.details())

    def rest_client():
        while not stop.is_set():
            code, body = rest(srv.rest_port, "/v1/models/m:predict", {"instances": ["y"]})
            if code != 200:
                failures.append(body)
            answered[0] += 1

    clients = [threading.Thread(target=f) for f in (grpc_client, grpc_client, rest_client)]
    refs, marks = [], {}
    try:
        for t in clients:
            t.start()
        for version in range(2, 22):
            refs.append(weakref.ref(srv.registry.models["m"].get()))
            add_version(base, version, heavy_tiny_model)
            srv.registry.poll_all()
            assert srv.registry.models["m"].loaded_versions() == [version]
            shutil.rmtree(os.path.join(base, str(version - 1)))
            if version in (6, 21):
                # requests in flight on the old version finish, then nothing holds it
                assert wait_until(lambda: gc.collect() is not None and refs[-1]() is None)
                marks[version] = (rss_mb(), threading.active_count(),
                                  srv.scheduler.queue_count())
    finally:
        stop.set()
        for t in clients:
            t.join(60)
        srv.stop()
    assert not failures, failures[:3]
    assert answered[0] > 20
    (rss6, threads6, queues6), (rss21, threads21, queues21) = marks[6], marks[21]
    # A thread kept per version would add 15; gRPC and waitress may have one request worker
    # more or fewer alive at the instant of either count.
    assert threads21 - threads6 <= 2, (threads6, threads21)
    assert queues21 <= 1 and queues6 <= 1  # only the serving version's queue
    assert rss21 - rss6 < 3 * 16, (rss6, rss21)  # 15 swaps; a leak would add 240 MB
    gc.collect()
    assert sum(r() is not None for r in refs) == 0  # every replaced version was freed


def _batched_server(base):
    # a 2 s batch timeout: a lone request waits in its queue that long unless it expires
    return Server({"m": base}, poll_seconds=0, batching=BatchingParameters(
        max_batch_size=8, batch_timeout_micros=2_000_000, num_batch_threads=1))


def test_a_version_unloaded_between_resolve_and_batching_is_still_freed(tiny_model, tmp_path):
    """The request resolved version 1, then version 1 was unloaded, then the request reached
    the batcher: its queue must not outlive it (holding version 1 for good)."""
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    srv = _batched_server(base)
    try:
        loaded = srv.predictor.resolve("m")
        sig = srv.predictor.signature(loaded, "serving_default")
        add_version(base, 2, tiny_model)
        srv.registry.poll_all()
        assert srv.registry.models["m"].loaded_versions() == [2]
        inputs = srv.predictor.inputs_from_json(loaded, sig, {"articles": ["a"]})
        assert srv.predictor.predict(loaded, sig, inputs)["summaries"].tolist() == [b"a"]
        ref = weakref.ref(loaded)
        del loaded, sig, inputs
        assert srv.scheduler.queue_count() == 0
        gc.collect()
        assert ref() is None
    finally:
        srv.stop()


def test_a_request_expiring_in_an_unloaded_versions_queue_frees_the_version(tiny_model,
                                                                            tmp_path):
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    srv = _batched_server(base)
    try:
        ref = weakref.ref(srv.registry.models["m"].get(1))
        failed = []

        def waiting_request():
            try:
                stub(srv).Predict(request({"articles": ["a"]}, name="m"), timeout=0.5)
            except grpc.RpcError as e:
                failed.append(e.code())

        t = threading.Thread(target=waiting_request)
        t.start()
        assert wait_until(lambda: srv.scheduler.queue_count() == 1)  # it waits in the queue
        add_version(base, 2, tiny_model)
        srv.registry.poll_all()  # version 1 is unloaded while its request waits
        t.join(30)
        assert failed == [grpc.StatusCode.DEADLINE_EXCEEDED]
        # the server's side of the deadline may end a moment after the client's
        assert wait_until(lambda: srv.scheduler.queue_count() == 0)
        assert wait_until(lambda: gc.collect() is not None and ref() is None)
        assert summaries(stub(srv).Predict(request({"articles": ["b"]}, name="m"),
                                           timeout=30)) == ["b"]
    finally:
        srv.stop()


def test_version_dirs_leading_out_of_the_base_path_are_refused_and_never_walked(
        tiny_model, tmp_path, caplog, monkeypatch):
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    elsewhere = add_version(str(tmp_path / "other"), 1, tiny_model)
    os.symlink(elsewhere, os.path.join(base, "25"))  # a loadable model outside the base
    big = tmp_path / "tree"
    for i in range(50):
        (big / f"d{i}").mkdir(parents=True)
        (big / f"d{i}" / "f").write_text("x")
    os.symlink(big, os.path.join(base, "99"))  # a tree that is no model at all
    os.makedirs(os.path.join(base, "7"))
    os.symlink(os.path.join(elsewhere, "saved_model.pb"), os.path.join(base, "7", "saved_model.pb"))
    inside = os.path.join(base, ".staging")
    shutil.copytree(tiny_model, inside)
    os.symlink(inside, os.path.join(base, "3"))  # a link that stays inside is served
    walked = []
    real_walk = os.walk
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: walked.append(top) or real_walk(
        top, *a, **k))
    model = ServedModel("m", ModelSpec(base, "all"))
    with caplog.at_level("WARNING", logger="serving"):
        for _ in range(3):
            model.poll()
    assert model.loaded_versions() == [1, 3]
    assert [v for v, _, _ in model.status()] == [1, 3]  # 7, 25 and 99 never even tried
    assert not any(os.path.realpath(w).startswith((str(big), elsewhere)) for w in walked)
    warnings = [r.getMessage() for r in caplog.records if "leads out of" in r.getMessage()]
    assert len(warnings) == 3 and all(str(tmp_path) not in w for w in warnings)  # once each


def test_only_canonical_ascii_version_dirs_are_versions(tiny_model, tmp_path):
    base = str(tmp_path / "m")
    for name in ("0002", "\u00b2", "03", "abc", ".tmp-9", "99999999999999999999"):
        shutil.copytree(tiny_model, os.path.join(base, name))
    add_version(base, 7, tiny_model)
    model = ServedModel("m", ModelSpec(base))
    assert model.versions_on_disk() == [7]
    model.poll()
    assert model.loaded_versions() == [7]


@pytest.mark.parametrize("spec, loaded", [
    (ModelSpec("", "latest", num_versions=2), [3, 4]),
    (ModelSpec("", "all"), [1, 2, 3, 4]),
    (ModelSpec("", "specific", versions=(1, 3, 9)), [1, 3]),
])
def test_version_policies(tiny_model, tmp_path, spec, loaded):
    base = str(tmp_path / "m")
    for v in (1, 2, 3, 4):
        add_version(base, v, tiny_model)
    spec.base_path = base
    model = ServedModel("m", spec)
    model.poll()
    assert model.loaded_versions() == loaded
    assert model.get().version == loaded[-1]


def test_version_labels_over_grpc_and_rest(tmp_path):
    from tests.serving.helpers import write_tiny_model

    base = str(tmp_path / "m")
    for v in (1, 2):
        write_tiny_model(os.path.join(base, str(v)), tag=f"@v{v}")
    spec = ModelSpec(base, "specific", versions=(1, 2, 3),
                     labels={"stable": 1, "canary": 2, "next": 3})
    srv = Server({"m": spec}, rest_port="auto", poll_seconds=0)
    try:
        s = stub(srv)
        assert summaries(s.Predict(request({"articles": ["a"]}, name="m", label="stable"))) == \
            ["a@v1"]
        resp = s.Predict(request({"articles": ["a"]}, name="m", label="canary"))
        assert summaries(resp) == ["a@v2"] and resp.model_spec.version.value == 2
        assert summaries(s.Predict(request({"articles": ["a"]}, name="m"))) == ["a@v2"]
        with pytest.raises(grpc.RpcError) as e:
            s.Predict(request({"articles": ["a"]}, name="m", label="next"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "version 3 (label 'next')" in \
            e.value.details()
        code, body = rest(srv.rest_port, "/v1/models/m/labels/stable:predict",
                          {"instances": ["b"]})
        assert code == 200 and body["predictions"] == [{"summaries": "b@v1", "scores": 1.0}]
        code, body = rest(srv.rest_port, "/v1/models/m/labels/canary")
        assert code == 200 and [s["version"] for s in body["model_version_status"]] == ["2"]
        code, body = rest(srv.rest_port, "/v1/models/m/labels/nope/metadata")
        assert code == 404 and "no version label 'nope'" in body["error"]
        req = get_model_status_pb2.GetModelStatusRequest()
        req.model_spec.name = "m"
        req.model_spec.version_label = "stable"
        st = model_service_pb2_grpc.ModelServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{srv.port}")).GetModelStatus(req)
        assert [v.version for v in st.model_version_status] == [1]
    finally:
        srv.stop()


class Clock:
    """Stands in for the time module in serving.models: monotonic() returns `now`, which the test
    moves. A poll then falls inside or past a backoff by the clock the backoff was set on, never
    by how fast the machine runs the test."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_a_failed_version_is_retried_on_a_backoff(tiny_model, tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(models, "time", clock)
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    attempts = []

    def flaky_load(name, version, path):  # the first two loads fail (a full disk, say)
        attempts.append(clock.now)
        if len(attempts) <= 2:
            raise OSError(f"transient failure reading {path}/variables")
        return LoadedVersion(name, version, path)

    model = ServedModel("m", ModelSpec(base), load=flaky_load, load_retry_interval_s=60,
                        max_load_retries=5)
    model.poll()
    assert model.loaded_versions() == [] and attempts == [0]
    (_, state, message), = model.status()
    assert state == "END" and "transient failure" in message and str(tmp_path) not in message
    clock.now = 59
    model.poll()
    assert attempts == [0]  # within the first backoff (60 s): not retried
    clock.now = 60
    model.poll()
    assert attempts == [0, 60] and model.loaded_versions() == []  # retried at its end; failed
    clock.now = 179
    model.poll()
    assert attempts == [0, 60]  # the second backoff is doubled: 120 s from the retry
    clock.now = 180
    model.poll()
    assert attempts == [0, 60, 180] and model.loaded_versions() == [1]
    assert 1 not in model._failed  # loaded: its failures are forgotten


def test_retries_stop_after_max_then_a_file_change_retries(tiny_model, tmp_path):
    base = str(tmp_path / "m")
    broken = os.path.join(base, "1")
    os.makedirs(broken)
    with open(os.path.join(broken, "saved_model.pb"), "wb") as f:
        f.write(b"half a model")
    model = ServedModel("m", ModelSpec(base), load_retry_interval_s=0.01, max_load_retries=1)
    assert wait_until(lambda: model.poll() is None and model._failed[1].attempts == 2)
    for _ in range(5):
        model.poll()  # retries spent: no more attempts, however often it polls
    assert model._failed[1].attempts == 2 and model._failed[1].retry_at == float("inf")
    shutil.rmtree(broken)
    shutil.copytree(tiny_model, broken)
    model.poll()
    assert model.loaded_versions() == [1]


def test_broken_version_is_skipped_and_old_one_keeps_serving(tiny_model, tmp_path):
    base = str(tmp_path / "m")
    add_version(base, 1, tiny_model)
    srv = Server({"m": base}, poll_seconds=0)
    try:
        broken = os.path.join(base, "5")
        os.makedirs(broken)
        with open(os.path.join(broken, "saved_model.pb"), "wb") as f:
            f.write(b"half a model")
        srv.registry.poll_all()
        assert summaries(stub(srv).Predict(request({"articles": ["a"]}, name="m"))) == ["a"]
        status = {v: (s, m) for v, s, m in srv.registry.models["m"].status()}
        assert status[1][0] == "AVAILABLE" and status[5][0] == "END"
        assert "failed to load" in status[5][1] and base not in status[5][1]
    finally:
        srv.stop()


def write_warmup(version_dir, logs):
    extra = os.path.join(version_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(extra, "tf_serving_warmup_requests")) as w:
        for log in logs:
            w.write(log.SerializeToString())


def test_warmup_requests_run_before_available_and_a_bad_file_fails_the_load(tiny_model,
                                                                            tmp_path):
    base = str(tmp_path / "m")
    good = os.path.join(base, "1")
    shutil.copytree(tiny_model, good)
    req = request({"articles": ["warm", "up"]}, name="m")
    write_warmup(good, [prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=req))])
    srv = Server({"m": base}, poll_seconds=0, warmup_iterations=2)
    try:
        assert srv.registry.models["m"].loaded_versions() == [1]
        batch = srv.metrics.batch_size.labels("m", "1", "serving_default")
        assert batch._sum.get() == 4  # two iterations of a 2-row request, before any client
        bad = os.path.join(base, "2")
        shutil.copytree(tiny_model, bad)
        write_warmup(bad, [prediction_log_pb2.PredictionLog(
            classify_log=prediction_log_pb2.ClassifyLog(
                request=classification_pb2.ClassificationRequest()))])
        srv.registry.poll_all()
        status = {v: (s, m) for v, s, m in srv.registry.models["m"].status()}
        assert status[2][0] == "END" and "classify_log" in status[2][1]
        assert srv.registry.models["m"].loaded_versions() == [1]
    finally:
        srv.stop()
