"""The running server a transport campaign fuzzes (serving.fuzz): `LoopbackServer` starts the
real `serving.service.Server` on loopback, gRPC and REST, over one model, and reads off it what
a campaign reports and checks:

* **Stages** an input reached: `transport` (a request came whole out of the transport: a gRPC
  handler was called with a parsed request message, or waitress handed a parsed request to the
  WSGI application), `decoder` (a Predict request's inputs became tensors:
  Predictor.inputs_from_protos / inputs_from_json returned) and `model_run` (the signature ran:
  Predictor.predict returned). Counted by wrapping those public methods of this process'
  objects; the server's code is not changed.
* **Memory**: answering one input may not raise the process' peak RSS by more than
  MAX_GROWTH_MB (`start_input` resets the high-water mark, `end_input` reads it).
* **Server faults in its logs** (`ErrorLog`): a record at ERROR or above from any logger while
  an input was answered (a handler's `log.exception`, waitress' "Exception while serving",
  grpc's "Exception calling application") is a finding, whatever the client saw.
* **Calls ended** (`wait_for_calls`): grpc.aio runs each call as a task of the server's event
  loop, which logs what goes wrong in it, also after the client read its status; a campaign
  waits for those tasks to end before it closes an input, so that what a call logs is its
  input's.
* **Answers as coverage** (`answer_feature`): the C++ of gRPC (HTTP/2 framing, decompression,
  size limits) carries no Python coverage, so libFuzzer would see no difference between inputs
  it answers differently. Each kind of answer (its status and the shape of its message, digits
  folded) calls one of 256 instrumented functions, a coverage feature libFuzzer keeps inputs
  for, so an input that provokes an answer not seen before joins the corpus.

Importing this module needs no atheris and starts nothing.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import re
import threading
import traceback
import zlib

from pgn_tf.utils import procfs
from tools.fuzz.fuzz_harness import (
    LABEL,
    MAX_GROWTH_MB,
    MODEL_NAME,
    MODEL_VERSION,
    Finding,
    _peak_kib,
)

METRICS_PATH = "/monitoring/prometheus/metrics"
STAGES = ("transport", "decoder", "model_run")


class Stages:
    """Which stages each input reached; `totals[stage]`: the inputs that reached it.

    Hits come from the server's threads while the harness waits for its answers, so one input
    is open at a time (`end_input` closes it)."""

    def __init__(self):
        self.totals: collections.Counter = collections.Counter()
        self.inputs = 0
        self._now: set = set()
        self._lock = threading.Lock()

    def reached(self, stage: str) -> None:
        with self._lock:
            self._now.add(stage)

    def current(self) -> frozenset:
        """The stages the open input reached so far."""
        with self._lock:
            return frozenset(self._now)

    def end_input(self) -> frozenset:
        with self._lock:
            now, self._now = frozenset(self._now), set()
        self.inputs += 1
        for stage in now:
            self.totals[stage] += 1
        return now

    def discard(self) -> None:
        """Forgets hits of what ran before the first input (the server's warm-up)."""
        with self._lock:
            self._now = set()


# Records at ERROR that are a library's own and no fault of the server, each with its reason:
# (logger, message prefix). One whose traceback passes through the server's code
# (`_SERVING_DIR`) is never tolerated: that is the server's fault, whatever logged it.
TOLERATED = (
    # grpcio decodes each metadata value as UTF-8 and, for one that is not (a client's header,
    # which HTTP/2 lets carry any octets), logs this with a traceback and uses its latin-1
    # reading; the call goes on and is answered as usual
    ("grpc._cython.cygrpc", "Invalid encoding on "),
    # grpc.aio answering a method nobody serves (UNIMPLEMENTED) on a call whose deadline has
    # already passed: the status cannot be sent any more, and grpc.aio logs that it could not
    ("grpc._cython.cygrpc", "ExecuteBatchError raised in core by servicer method"),
)
_SERVING_DIR = os.path.dirname(os.path.abspath(__file__))


def _in_server_code(record: logging.LogRecord) -> bool:
    tb = record.exc_info[2] if record.exc_info else None
    return any(os.path.abspath(frame.filename).startswith(_SERVING_DIR)
               for frame in traceback.extract_tb(tb)) if tb is not None else False


class ErrorLog(logging.Handler):
    """Keeps the first line of each record at ERROR or above, of any logger, but TOLERATED."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[str] = []
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if any(record.name == name and str(record.msg).startswith(prefix)
               for name, prefix in TOLERATED) and not _in_server_code(record):
            return
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001  (a record whose arguments do not format)
            text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        with self._lock2:
            self.records.append(f"{record.name}: {text.splitlines()[0] if text else ''}"[:500])

    def take(self) -> list[str]:
        with self._lock2:
            out, self.records = self.records, []
        return out


# -- answers as coverage features ------------------------------------------------------------

_DIGITS = re.compile(r"\d+")
N_FEATURES = 256


def _feature_functions(n: int) -> list:
    """n functions of one body; `instrument` gives each its own coverage counters."""
    def make():
        def feature() -> None:
            return None
        return feature
    return [make() for _ in range(n)]


FEATURES = _feature_functions(N_FEATURES)


def answer_key(*parts) -> str:
    """An answer's kind: its parts, digits folded to N, each cut to 60 characters."""
    return "|".join(_DIGITS.sub("N", str(p))[:60] for p in parts)


def answer_feature(key: str) -> None:
    """Marks the answer kind `key` (answer_key) as a coverage feature of the current input."""
    FEATURES[zlib.crc32(key.encode("utf-8", "replace")) % N_FEATURES]()


def instrument_features() -> None:
    import atheris

    for fn in FEATURES:
        atheris.instrument_func(fn)


# -- the server ------------------------------------------------------------------------------

_current: list = []  # the Stages the wrapped gRPC handlers report to (one server a process)


def _watch_handlers() -> None:
    """Wraps grpc_service.Services' handlers (before a Server builds its own Services) to
    report `transport` for a parsed request; once a process."""
    from pgn_tf.serving import grpc_service

    if getattr(grpc_service.Services, "_fuzz_watched", False):
        return
    for name in ("predict", "metadata", "status"):
        original = getattr(grpc_service.Services, name)

        def watched(self, request, context, _original=original):
            if _current and hasattr(request, "model_spec"):  # not a _Malformed: it parsed
                _current[-1].reached("transport")
            return _original(self, request, context)

        functools.update_wrapper(watched, original)
        setattr(grpc_service.Services, name, watched)
    grpc_service.Services._fuzz_watched = True


def _reporting(fn, stages: Stages, stage: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        stages.reached(stage)  # returned: the stage was passed
        return out
    return wrapper


def _task_name(task: asyncio.Task) -> str:
    coro = task.get_coro()
    return getattr(coro, "__qualname__", type(coro).__name__)


async def _task_names() -> list[str]:
    me = asyncio.current_task()
    return [_task_name(t) for t in asyncio.all_tasks() if t is not me]


def _under_way(tasks, idle: frozenset) -> list[asyncio.Task]:
    """The tasks not done but those named in `idle`."""
    return [t for t in tasks if not t.done() and _task_name(t) not in idle]


async def _calls_ended(idle: frozenset, timeout_s: float) -> list[str]:
    """Waits up to timeout_s for the loop's tasks but those named in `idle`; the names of those
    still running then."""
    me = asyncio.current_task()
    calls = _under_way(asyncio.all_tasks() - {me}, idle)
    if calls:
        await asyncio.wait(calls, timeout=timeout_s)
    return sorted(_task_name(t) for t in calls if not t.done())


class LoopbackServer:
    """serving.service.Server on 127.0.0.1 (gRPC and REST on free ports, the metrics page at
    METRICS_PATH) over BASE/pgn, version MODEL_VERSION labelled LABEL; `options`: other
    ServerOptions fields (the defaults otherwise, as a user starts it). Versions are polled
    once: a campaign's model never changes under it. max_growth_mb: how much answering one
    input may raise the process' peak RSS (fuzz_harness.MAX_GROWTH_MB: requests are bounded
    well under it).

    Attributes: server (the Server), stages (Stages), errors (ErrorLog), base, grpc_port,
    rest_port.
    """

    def __init__(self, base: str, max_growth_mb: float = MAX_GROWTH_MB, **options):
        from pgn_tf.serving.models import ModelSpec
        from pgn_tf.serving.service import Server

        self.base = base
        self.max_growth_mb = max_growth_mb
        self._peak_before = None
        self.stages = Stages()
        _current.append(self.stages)
        _watch_handlers()
        spec = ModelSpec(os.path.join(base, MODEL_NAME), labels={LABEL: MODEL_VERSION})
        self.server = Server({MODEL_NAME: spec}, rest_port="auto", poll_seconds=0,
                             metrics_path=METRICS_PATH, **options)
        p = self.server.predictor
        p.inputs_from_protos = _reporting(p.inputs_from_protos, self.stages, "decoder")
        p.inputs_from_json = _reporting(p.inputs_from_json, self.stages, "decoder")
        p.predict = _reporting(p.predict, self.stages, "model_run")
        self.stages.discard()
        self.errors = ErrorLog()
        logging.getLogger().addHandler(self.errors)
        self.grpc_port = self.server.port
        self.rest_port = self.server.rest_port
        # the tasks the loop runs with no call under way (the server's own: accepting calls)
        self._idle_tasks = frozenset(self._on_loop(_task_names(), 60))

    def start_input(self) -> None:
        """Opens an input: the process' RSS high-water mark is reset (pgn_tf.utils.procfs), so
        end_input sees what answering it took."""
        self._peak_before = _peak_kib() if procfs.reset_peak() else None

    def end_input(self, where: str) -> frozenset:
        """Closes the current input: its stages; Finding for a server fault it logged, or for
        an answer that raised the process' peak RSS more than max_growth_mb."""
        errors = self.errors.take()
        stages = self.stages.end_input()
        before, self._peak_before = self._peak_before, None
        if before is not None:
            grown = (_peak_kib() - before) / 1024
            if grown > self.max_growth_mb:
                raise Finding(f"{where}: the process' RSS peaked {grown:.0f} MB above where it "
                              "was while it was answered")
        if errors:
            raise Finding(f"{where}: the server logged an error: {errors[0]}"
                          + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
        return stages

    def abandon_input(self) -> None:
        """Closes an input that raised a Finding before end_input: the next starts clean."""
        self.errors.take()
        self.stages.discard()
        self._peak_before = None

    def wait_for_calls(self, timeout_s: float, where: str) -> None:
        """Waits until no gRPC call is under way on the server's event loop (each call's task
        has ended, and with it what the call logs); Finding for calls still under way after
        timeout_s. Only calls gRPC has handed to the loop are seen: a campaign asks once its
        input's streams were answered or their connection closed."""
        from pgn_tf.serving import grpc_server

        # read from this thread first (asyncio.all_tasks allows it): most inputs' calls have
        # ended by the time their answer is read, and the loop is then not asked
        if not _under_way(asyncio.all_tasks(grpc_server._io_loop()), self._idle_tasks):
            return
        left = self._on_loop(_calls_ended(self._idle_tasks, timeout_s), timeout_s + 60)
        if left:
            raise Finding(f"{where}: {len(left)} gRPC calls still under way {timeout_s:g} s "
                          f"after the input's streams ended ({', '.join(left[:5])})")

    @staticmethod
    def _on_loop(coro, timeout_s: float):
        from pgn_tf.serving import grpc_server

        return asyncio.run_coroutine_threadsafe(coro, grpc_server._io_loop()).result(timeout_s)

    def check_message(self, where: str, message, limit: int) -> None:
        """Finding for an error message longer than `limit` characters or naming the export's
        path (serving.status keeps both out of what a client reads)."""
        if not isinstance(message, str) or len(message) > limit:
            raise Finding(f"{where}: an error message of {len(str(message))} characters")
        if self.base in message:
            raise Finding(f"{where}: an error message names the export's path: {message[:300]}")

    def stop(self) -> None:
        logging.getLogger().removeHandler(self.errors)
        if self.stages in _current:
            _current.remove(self.stages)
        self.server.stop()
