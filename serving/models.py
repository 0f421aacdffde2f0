"""Versioned SavedModels on disk, loaded and swapped the way TF Serving does it.

A model's base path holds version dirs named by canonical ASCII decimal numbers (`BASE/1/`,
`BASE/2/`; `0002`, `²` or `.tmp-3` are ignored, as a half-written export's temp name must be).
A poller loads the versions the version policy wants (`latest` N, `all`, or `specific`
versions), replays the version's warm-up requests, and only then marks it AVAILABLE; the highest
available version serves requests that name no version, and `version_labels` map names to
versions. A version that fails to load is logged and skipped while the one already serving
keeps serving; it is retried when its files change, or on a backoff (`load_retry_interval_s`,
doubling, at most `max_load_retries` times). A request holds a reference to the version it
started on, so a swap never fails a request in flight, and nothing else holds it: a batching
queue lives only while it holds requests (serving.batching), so an unloaded version is freed
once its last request is answered (LoadedVersion.live() counts the versions alive).

What the export promises the server (its input limits, the decoding defaults that size a
request's work budget) is read from the SavedModel itself when a version loads
(pgn_tf.saved_model.contract); a version whose contract cannot be read is served with the
conservative contract, serving_contract.CONSERVATIVE, and one warning naming the model, the
version and what was wrong. The assets.extra/ files of an export are not read for limits: a copy
of only saved_model.pb and variables/ is held to the same limits as the full export.

Version dirs are served only from inside the base path (serving.containment): a version dir
that is, or holds at any depth, a symbolic link leading out of it, or whose SavedModel names an
asset file that would be opened outside it, is refused with one warning, where stock TF
Serving follows such links and names. It is checked when the poller lists the versions and
again once a version has loaded, before it is marked AVAILABLE, so a change swapped in while it
loaded is caught.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import gc
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from pgn_tf.saved_model import contract as serving_contract
from pgn_tf.serving.containment import Containment
from pgn_tf.serving.status import echo, not_found, redact

log = logging.getLogger("serving")

_VERSION_DIR = re.compile(r"0|[1-9][0-9]{0,18}")  # canonical ASCII decimal, fits an int64


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
    """One loaded SavedModel version: its signatures, signature defs and serving contract.

    `contract` is the export's pgn_tf.saved_model.contract.ServingContract, read from the SavedModel
    (read_contract), or serving_contract.CONSERVATIVE when it cannot be read; `contract_problem`
    then says why (None when it was read). `input_limits` is the contract's
    {signature: {scalar input: (low, high)}} (the ranges the graph asserts; serving.validation
    checks them first) and `decode_defaults` its {beam_size, max_decode_steps}: the work a
    request may ask for is counted with them (serving.predict).

    Every instance is counted in `live()` until it is garbage: a version that outlives its
    unload shows there.
    """

    _live: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, name: str, version: int, path: str):
        LoadedVersion._live.add(self)
        self.name = name
        self.version = version
        self.path = path
        self.module = tf.saved_model.load(path)
        self.signatures = {}
        for sig_name, fn in self.module.signatures.items():
            inputs = fn.structured_input_signature[1]
            self.signatures[sig_name] = Signature(sig_name, fn, dict(inputs),
                                                  dict(fn.structured_outputs))
        with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
            sm = saved_model_pb2.SavedModel.FromString(f.read())
        self.signature_defs = {k: v for k, v in sm.meta_graphs[0].signature_def.items()
                               if not k.startswith("__")}
        self.contract, self.contract_problem = read_contract(name, version, self.module,
                                                             self.signatures)
        self.input_limits = {sig: dict(r) for sig, r in self.contract.input_limits.items()}
        self.decode_defaults = self.contract.decode_defaults

    @staticmethod
    def live(collect: bool = False) -> int:
        """How many versions are alive in this process (loaded, or still referenced).
        collect: run the cycle collector first (a version's tf.function graphs hold reference
        cycles, so an unreferenced one may wait for it)."""
        if collect:
            gc.collect()
        return len(LoadedVersion._live)


def read_contract(name: str, version: int, module, signatures: dict
                  ) -> tuple[serving_contract.ServingContract, str | None]:
    """(contract, None) when the loaded SavedModel `module` holds a readable contract that
    describes its `signatures` ({name: Signature}); else (serving_contract.CONSERVATIVE, the
    problem), with one warning naming the model, the version and the problem."""
    try:
        contract = serving_contract.from_saved_model(module)
        contract.check_signatures({k: s.inputs for k, s in signatures.items()})
        return contract, None
    except serving_contract.ContractError as e:
        c = serving_contract.CONSERVATIVE
        problem = str(e)
        log.warning("model %s version %d: cannot read its serving contract: %s; serving it "
                    "with the conservative budget (requests counted as beam %d x %d steps a "
                    "row, %s %s) until it is re-exported with pgn_tf.export", name, version,
                    problem, c.beam_size, c.max_decode_steps, serving_contract.SUMMARIZE_OPTIONS,
                    describe_limits(c.input_limits[serving_contract.SUMMARIZE_OPTIONS]))
        return c, problem


def describe_limits(limits: dict) -> str:
    """{input: (low, high)} -> "beam_size in [1, 4], ..." for messages."""
    return ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in limits.items())


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS); looked up on
    first use (find_library runs ldconfig: importing this module starts no process)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Frees an unloaded version now and gives its pages back to the system: its tf.function
    graphs hold reference cycles (the cycle collector frees them), and glibc keeps freed heap
    pages for reuse unless trimmed, so without the trim a server's RSS creeps up with every
    swap although no version is kept (benchmarks/soak.py)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_FINGERPRINT_MAX_FILES = 10_000  # a SavedModel has a handful; a tree of more is not one


def _fingerprint(path: str) -> tuple:
    """Changes whenever a file of a version dir changes (name, size or mtime). Reads the version
    dir and one level below it (a SavedModel's variables/, assets/, assets.extra/), follows no
    symbolic link and stops after _FINGERPRINT_MAX_FILES entries, so a poll costs little
    whatever the dir holds."""
    out = []
    for root, dirs, files in os.walk(path):
        if root != path:
            dirs.clear()  # no deeper than one level below the version dir
        for fn in files:
            try:
                st = os.stat(os.path.join(root, fn), follow_symlinks=False)
            except OSError:
                continue
            out.append((os.path.relpath(os.path.join(root, fn), path), st.st_size, st.st_mtime_ns))
            if len(out) >= _FINGERPRINT_MAX_FILES:
                return tuple(sorted(out))
    return tuple(sorted(out))


@dataclasses.dataclass
class ModelSpec:
    """One model of a ModelServerConfig.

    Args:
      base_path: the dir of version dirs.
      policy: "latest" (the num_versions highest), "all", or "specific" (`versions`).
      labels: version_labels, label -> version.
    """

    base_path: str
    policy: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()
    labels: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.policy not in ("latest", "all", "specific"):
            raise ValueError(f"unknown version policy '{self.policy}'")
        if self.policy == "specific" and not self.versions:
            raise ValueError("the 'specific' version policy needs at least one version")
        if self.policy == "latest" and self.num_versions < 1:
            raise ValueError("latest { num_versions } must be at least 1")
        for label, v in self.labels.items():
            if not label or not isinstance(v, int) or v < 0:
                raise ValueError(f"bad version label '{label}': {v}")
            if self.policy == "specific" and v not in self.versions:
                raise ValueError(f"version label '{label}' points to version {v}, which the "
                                 f"'specific' policy does not load (versions "
                                 f"{list(self.versions)})")


@dataclasses.dataclass
class _Failure:
    fingerprint: tuple
    attempts: int
    retry_at: float  # time.monotonic(); inf once the retries are spent


class ServedModel:
    """One model name: its versions on disk and the loaded ones.

    Args:
      name: the model name requests use; spec: ModelSpec.
      load: callable(name, version, path) -> LoadedVersion (also replays warm-up requests).
      load_retry_interval_s, max_load_retries: the backoff of failed versions.
    """

    def __init__(self, name: str, spec: ModelSpec, load: Callable | None = None,
                 load_retry_interval_s: float = 60.0, max_load_retries: int = 5):
        self.name = name
        self.spec = spec
        self.base_path = spec.base_path
        self.load = load or LoadedVersion
        self.load_retry_interval_s = load_retry_interval_s
        self.max_load_retries = max_load_retries
        self._lock = threading.Lock()
        self._loaded: dict[int, LoadedVersion] = {}
        self._failed: dict[int, _Failure] = {}
        self._state: dict[int, tuple[str, str]] = {}  # version -> (state, error message)
        self._warned: set[str] = set()
        self._containment = Containment(self.base_path)

    def leads_out(self, d: str, loaded: bool = False) -> bool:
        """Whether version dir `d` (a name under the base path) leads out of the base path: it
        is, or holds at any depth, a link leading out, or its SavedModel names an asset file
        that does (serving.containment); warns once while it does. loaded: the version has
        loaded (a saved_model.pb that cannot be parsed is then refused too)."""
        outside = self._containment.leads_out(d, loaded)
        if outside is None:
            self._warned.discard(f"outside:{d}")  # warned again if it leaves again
            return False
        if f"outside:{d}" not in self._warned:
            self._warned.add(f"outside:{d}")
            log.warning("model %s: not serving version dir %r: %s; versions are served only "
                        "from inside --model_base_path", self.name, d, outside)
        return True

    def versions_on_disk(self) -> list[int]:
        if not tf.io.gfile.isdir(self.base_path):
            return []
        out, listed = [], []
        for d in tf.io.gfile.listdir(self.base_path):
            d = d.rstrip("/")
            if _VERSION_DIR.fullmatch(d) and int(d) < 2**63:
                listed.append(d)
                if self.leads_out(d):
                    continue
                out.append(int(d))
            elif d.isdigit() and d not in self._warned:  # "0002", "²": not TF Serving's names
                self._warned.add(d)
                log.warning("model %s: ignoring version dir %r (versions are canonical ASCII "
                            "decimal numbers: 1, 2, 10)", self.name, d)
        self._containment.retain(listed)
        return sorted(out)

    def wanted(self, on_disk: list[int]) -> list[int]:
        """The versions the policy keeps loaded, highest first."""
        if self.spec.policy == "all":
            return sorted(on_disk, reverse=True)
        if self.spec.policy == "specific":
            return sorted((v for v in on_disk if v in self.spec.versions), reverse=True)
        return sorted(on_disk, reverse=True)

    def _may_try(self, v: int, path: str) -> bool:
        failure = self._failed.get(v)
        if failure is None:
            return True
        if _fingerprint(path) != failure.fingerprint:
            failure.attempts = 0  # new files: a fresh start
            return True
        return time.monotonic() >= failure.retry_at

    def _record_failure(self, v: int, path: str, e: Exception) -> None:
        msg = redact(str(e)) or type(e).__name__
        f = self._failed.get(v) or _Failure((), 0, 0.0)
        f.fingerprint = _fingerprint(path)
        f.attempts += 1
        if f.attempts > self.max_load_retries:
            f.retry_at = float("inf")  # until its files change
            when = "not retried until its files change"
        else:
            delay = self.load_retry_interval_s * 2 ** (f.attempts - 1)
            f.retry_at = time.monotonic() + delay
            when = f"retry {f.attempts} of {self.max_load_retries} in {delay:g} s"
        self._failed[v] = f
        log.error("model %s version %d failed to load (%s): %s", self.name, v, when, msg)
        self._state[v] = ("END", f"failed to load: {msg}")

    def poll(self) -> None:
        """Loads the wanted versions not loaded yet; unloads those that fell out or vanished."""
        keep = []
        limit = self.spec.num_versions if self.spec.policy == "latest" else None
        for v in self.wanted(self.versions_on_disk()):
            if limit is not None and len(keep) == limit:
                break
            path = os.path.join(self.base_path, str(v))
            if v in self._loaded:
                keep.append(v)
                continue
            if not self._may_try(v, path):
                continue  # the next lower version may serve
            self._state[v] = ("LOADING", "")
            try:
                loaded = self.load(self.name, v, path)
            except Exception as e:  # any load or warm-up failure: keep serving what we have
                self._record_failure(v, path, e)
                continue
            if self.leads_out(str(v), loaded=True):  # changed while it loaded: not served
                self._state[v] = ("END", "refused: it leads out of the base path")
                del loaded
                release_freed_memory()
                continue
            with self._lock:
                self._loaded[v] = loaded
            self._failed.pop(v, None)
            self._state[v] = ("AVAILABLE", "")
            log.info("model %s version %d loaded", self.name, v)
            keep.append(v)
        dropped = []
        with self._lock:
            for v in list(self._loaded):
                if v not in keep:
                    dropped.append(self._loaded.pop(v))
                    self._state[v] = ("END", "")
        for loaded in dropped:
            log.info("model %s version %d unloaded", self.name, loaded.version)
        if dropped:
            del loaded, dropped
            release_freed_memory()

    def get(self, version: int | None = None) -> LoadedVersion | None:
        """The loaded version (the highest when none is given), or None."""
        with self._lock:
            if version is None:
                return self._loaded[max(self._loaded)] if self._loaded else None
            return self._loaded.get(version)

    def resolve(self, version: int | None = None, label: str | None = None) -> LoadedVersion:
        """The loaded version a request asks for (the highest when it names neither version nor
        label); RequestError NOT_FOUND otherwise."""
        if label is not None:
            if label not in self.spec.labels:
                labels = ", ".join(sorted(self.spec.labels)) or "none"
                raise not_found(f"model '{self.name}' has no version label '{echo(label)}' "
                                f"(labels: {labels})")
            version = self.spec.labels[label]
        with self._lock:
            if version is None:
                if self._loaded:
                    return self._loaded[max(self._loaded)]
                raise not_found(f"Servable not found for request: no version of model "
                                f"'{self.name}' is loaded")
            loaded = self._loaded.get(version)
        if loaded is None:
            via = f" (label '{echo(label)}')" if label is not None else ""
            raise not_found(f"Servable not found for request: version {version}{via} of model "
                            f"'{self.name}' is not loaded")
        return loaded

    def has_loaded(self) -> bool:
        with self._lock:
            return bool(self._loaded)

    def loaded_versions(self) -> list[int]:
        with self._lock:
            return sorted(self._loaded)

    def status(self) -> list[tuple[int, str, str]]:
        return sorted((v, s, m) for v, (s, m) in list(self._state.items()))

    def unload_all(self) -> None:
        with self._lock:
            dropped = list(self._loaded.values())
            self._loaded.clear()
        for loaded in dropped:
            self._state[loaded.version] = ("END", "")


class ModelRegistry:
    """All served models plus the poller thread."""

    def __init__(self, models: dict[str, ServedModel], poll_seconds: float = 1.0):
        self.models = models
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread = None

    def model(self, name: str) -> ServedModel:
        m = self.models.get(name)
        if m is None:
            raise not_found(f"Servable not found for request: model '{echo(name)}' is not served "
                            f"(serving: {', '.join(sorted(self.models))})")
        return m

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
        if self._thread is not None:
            self._thread.join(timeout=60)
        for m in self.models.values():
            m.unload_all()
