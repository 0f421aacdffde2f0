"""Versioned SavedModels on disk, loaded and swapped the way TF Serving does it.

A model's base path holds numeric version dirs (`BASE/NAME/1/`, `BASE/NAME/2/`, ...). A poller
loads new versions in the background; the highest loaded version serves requests that name no
version. A version that fails to load (half-written, corrupt) is logged and skipped, and the one
already serving keeps serving; it is retried only when its files change. A request holds a
reference to the version it started on, so a swap never fails a request in flight.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

log = logging.getLogger("serving")


@dataclasses.dataclass
class Signature:
    name: str
    fn: object  # a concrete function taking keyword tensors
    inputs: dict  # name -> tf.TensorSpec
    outputs: dict  # name -> tf.TensorSpec

    @property
    def batchable(self) -> bool:
        """All inputs and outputs carry a leading batch dimension (so requests can be merged)."""
        specs = list(self.inputs.values()) + list(self.outputs.values())
        return all(s.shape.rank and s.shape.rank >= 1 and s.shape[0] is None for s in specs)


class LoadedVersion:
    def __init__(self, name: str, version: int, path: str):
        self.name = name
        self.version = version
        self.path = path
        self.module = tf.saved_model.load(path)
        self.signatures = {}
        for sig_name, fn in self.module.signatures.items():
            inputs = fn.structured_input_signature[1]
            self.signatures[sig_name] = Signature(sig_name, fn, dict(inputs), dict(fn.structured_outputs))
        with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
            sm = saved_model_pb2.SavedModel.FromString(f.read())
        self.signature_defs = {k: v for k, v in sm.meta_graphs[0].signature_def.items()
                               if not k.startswith("__")}


def _fingerprint(path: str) -> tuple:
    """Changes whenever any file of a version dir changes (size or mtime)."""
    out = []
    for root, _, files in os.walk(path):
        for fn in files:
            st = os.stat(os.path.join(root, fn))
            out.append((os.path.relpath(os.path.join(root, fn), path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class ServedModel:
    """One model name: its versions on disk and the loaded ones.

    Args:
      name: the model name requests use; base_path: the dir of numeric version dirs;
      num_versions: how many of the highest versions stay loaded (TF Serving's default policy
        is 1: only the latest).
    """

    def __init__(self, name: str, base_path: str, num_versions: int = 1):
        self.name = name
        self.base_path = base_path
        self.num_versions = max(1, num_versions)
        self._lock = threading.Lock()
        self._loaded: dict[int, LoadedVersion] = {}
        self._failed: dict[int, tuple] = {}  # version -> fingerprint at the failed load
        self._state: dict[int, tuple[str, str]] = {}  # version -> (state, error message)

    def versions_on_disk(self) -> list[int]:
        if not tf.io.gfile.isdir(self.base_path):
            return []
        return sorted(int(d.rstrip("/")) for d in tf.io.gfile.listdir(self.base_path)
                      if d.rstrip("/").isdigit())

    def poll(self) -> None:
        """Loads the highest versions not loaded yet; unloads those that fell out or vanished."""
        on_disk = self.versions_on_disk()
        wanted = []
        for v in reversed(on_disk):
            if len(wanted) == self.num_versions:
                break
            path = os.path.join(self.base_path, str(v))
            if v in self._loaded:
                wanted.append(v)
                continue
            fp = _fingerprint(path)
            if self._failed.get(v) == fp:
                continue  # unchanged since it failed; the next lower version may serve
            self._state[v] = ("LOADING", "")
            try:
                loaded = LoadedVersion(self.name, v, path)
            except Exception as e:  # any load failure: log it, keep serving what we have
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                log.error("model %s version %d failed to load, skipped: %s", self.name, v, msg)
                self._failed[v] = fp
                self._state[v] = ("END", f"failed to load: {msg}")
                continue
            with self._lock:
                self._loaded[v] = loaded
            self._failed.pop(v, None)
            self._state[v] = ("AVAILABLE", "")
            log.info("model %s version %d loaded from %s", self.name, v, path)
            wanted.append(v)
        with self._lock:
            for v in list(self._loaded):
                if v not in wanted:
                    del self._loaded[v]  # requests holding it finish; GC frees it after
                    self._state[v] = ("END", "")
                    log.info("model %s version %d unloaded", self.name, v)

    def get(self, version: int | None = None) -> LoadedVersion | None:
        with self._lock:
            if version is None:
                return self._loaded[max(self._loaded)] if self._loaded else None
            return self._loaded.get(version)

    def status(self) -> list[tuple[int, str, str]]:
        return sorted((v, s, m) for v, (s, m) in self._state.items())


class ModelRegistry:
    """All served models plus the poller thread."""

    def __init__(self, models: dict[str, ServedModel], poll_seconds: float = 1.0):
        self.models = models
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread = None

    def poll_all(self) -> None:
        for m in self.models.values():
            try:
                m.poll()
            except Exception:  # a poll error must never kill the poller
                log.exception("polling model %s failed", m.name)

    def start(self) -> None:
        self.poll_all()
        if self.poll_seconds > 0:
            self._thread = threading.Thread(target=self._run, name="version-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self.poll_all()

    def stop(self) -> None:
        self._stop.set()
