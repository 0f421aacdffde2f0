"""Stopping model runs whose requests are gone: an expired deadline or a client that hung up.

A request's deadline used to be checked only before its run started; once a beam search was
under way it ran to its end, for nobody. Here each run is given a TensorFlow
`CancellationManager`, and one watchdog thread cancels it as soon as every request waiting for
it is gone: for an unbatched run its one request, for a merged batch all of the batch's requests
(one live request keeps the batch running). A cancelled run stops at the next op the executor
schedules, inside the search's `tf.while_loop` too, so the CPU is free again within about one
decoding step (benchmarks/deadline_stop.py measures how soon).

TensorFlow picks the manager of a call up from a process-wide variable
(`tensorflow.python.eager.cancellation.context()`, read by `Context.call_function`), which two
threads running at once would overwrite for each other. `_install` replaces that lookup once
with a thread-local one, so every serving thread runs under its own manager; code that uses
TensorFlow's own `CancellationManagerContext` still works, as the fallback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tensorflow as tf
from tensorflow.python.eager import cancellation as tf_cancellation

from pgn_tf.serving.status import Code, RequestError

_local = threading.local()
_install_lock = threading.Lock()


def _install() -> None:
    """Makes TensorFlow read the cancellation manager of the calling thread."""
    with _install_lock:
        if getattr(tf_cancellation.context, "_pgn_tf_thread_local", False):
            return
        fallback = tf_cancellation.context

        def context():
            return getattr(_local, "manager", None) or fallback()

        context._pgn_tf_thread_local = True
        tf_cancellation.context = context


class Call:
    """One request as the server sees it: when its answer is due and whether its client left.

    Args:
      deadline: time.monotonic() seconds by which the answer is due, or None.
    """

    def __init__(self, deadline: float | None = None):
        self.deadline = deadline
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """The client went away (gRPC's RPC-termination callback; harmless after an answer)."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """Calls fn() when the client goes away (at once if it has)."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(fn)
                return
        fn()

    def gone(self, now: float) -> bool:
        """Nobody waits for this request's answer any more."""
        return self._cancelled or (self.deadline is not None and now >= self.deadline)

    def error(self) -> RequestError:
        """The status of a request that is gone."""
        if self._cancelled:
            return RequestError(Code.CANCELLED, "the client cancelled the request")
        return RequestError(Code.DEADLINE_EXCEEDED, "deadline exceeded while the request ran")


class _Run:
    __slots__ = ("manager", "calls", "stopped")

    def __init__(self, calls: list[Call]):
        self.manager = tf_cancellation.CancellationManager()
        self.calls = calls
        self.stopped = False

    def due(self) -> float | None:
        """When every call will be gone (None: never by time; a live call has no deadline)."""
        if not self.calls:
            return None
        live = [c for c in self.calls if not c.cancelled]
        if any(c.deadline is None for c in live):
            return None
        return max((c.deadline for c in live), default=0.0)


class Watchdog:
    """Runs functions under a cancellation manager it cancels once their requests are gone."""

    def __init__(self):
        _install()
        self._cv = threading.Condition()
        self._runs: set[_Run] = set()  # watched: not yet finished nor stopped
        self._active = 0  # runs not yet returned, stopped ones too
        self._closed = False
        self._thread = threading.Thread(target=self._watch, daemon=True, name="run-watchdog")
        self._thread.start()

    def run(self, fn: Callable[[], object], calls: list[Call]):
        """fn() under a manager cancelled when every call is gone. Raises the gone call's
        RequestError (DEADLINE_EXCEEDED or CANCELLED) when the run was stopped."""
        entry = _Run(calls)
        with self._cv:
            self._runs.add(entry)
            self._active += 1
            self._cv.notify()
        for c in calls:
            c.on_cancel(self._poke)
        previous = getattr(_local, "manager", None)
        _local.manager = entry.manager
        try:
            return fn()
        except tf.errors.CancelledError:
            if entry.stopped:
                raise _gone_error(calls) from None
            raise
        finally:
            _local.manager = previous
            with self._cv:
                self._runs.discard(entry)
                self._active -= 1

    def active(self) -> int:
        """Runs under way (a stopped one counts until its function has returned)."""
        with self._cv:
            return self._active

    def _poke(self) -> None:
        with self._cv:
            self._cv.notify()

    def _watch(self) -> None:
        with self._cv:
            while not self._closed:
                now = time.monotonic()
                wake = None
                for entry in list(self._runs):
                    due = entry.due()
                    if due is not None and now >= due:
                        entry.stopped = True
                        entry.manager.start_cancel()
                        self._runs.discard(entry)
                    elif due is not None:
                        wake = due if wake is None else min(wake, due)
                self._cv.wait(None if wake is None else max(0.0, wake - now))

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=5)


def _gone_error(calls: list[Call]) -> RequestError:
    return next((c.error() for c in calls if c.cancelled), calls[0].error())
