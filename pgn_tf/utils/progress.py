"""Progress bars for long loops on standard output: Keras' Progbar for counts, and StepBar for
a loop of compiled steps, whose first step also traces and compiles the step function. By
default a bar is shown only when standard output is a terminal, so logs and tests stay clean."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence


def verbosity(verbose: int | None) -> int:
    """verbose None -> 1 when standard output is a terminal, else 0."""
    if verbose is None:
        return 1 if hasattr(sys.stdout, "isatty") and sys.stdout.isatty() else 0
    return int(verbose)


def progbar(target: int | None, unit: str, verbose: int | None = None, interval: float = 1.0):
    """A keras.utils.Progbar counting `unit`s towards `target` (None: unknown)."""
    import keras

    return keras.utils.Progbar(target, verbose=verbosity(verbose), interval=interval,
                               unit_name=unit)


def counted(items, bar):
    """Yields the items, adding one to `bar` for each (the last update finalizes it)."""
    n = 0
    for n, item in enumerate(items, 1):  # noqa: B007
        if n % 256 == 0:
            bar.update(n)
        yield item
    bar.update(n, finalize=True)


def duration(seconds: float) -> str:
    """`45s`, `3:07` or `1:02:03`."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _value(v) -> str:
    if isinstance(v, int):
        return str(v)
    return f"{v:.4f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.4e}"


class StepBar:
    """One progress line for a loop of compiled steps, towards `target` steps, or towards
    `target` seconds with `budget` (a time budget: then the ETA is the budget left).

    A step function is traced and compiled at its first call, so a short run's first step can
    take longer than all the others: a pace taken from it would promise hours for a minute's
    run. Until a step after the first has been timed, the line says `compiling` where the ETA
    goes; the pace, and the ETA from it, count only the steps after the first.

    Shows the latest `values` given, as given. On a terminal the line is rewritten in place;
    elsewhere (a pipe, a log file) it is printed afresh each `interval` seconds. `clock` and
    `stream` (default: sys.stdout when each line is written) are there for tests."""

    def __init__(self, target: int, verbose: int | None = None, interval: float = 5.0,
                 budget: bool = False,
                 clock: Callable[[], float] = time.perf_counter, stream=None, width: int = 20):
        self.target, self.budget = max(1, int(target)), budget
        self.verbose, self.interval, self.width = verbosity(verbose), interval, width
        self.clock, self._stream = clock, stream
        self.start = clock()
        self.first: tuple[float, int] | None = None  # (time, steps done) after the first step
        self.values: dict = {}
        self._shown_at: float | None = None
        self._shown_timed = False
        self._width = 0

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stdout

    def pace(self, done: int, now: float) -> float | None:
        """Seconds a step after the first, or None while no such step is timed."""
        if self.first is None or done <= self.first[1]:
            return None
        return (now - self.first[0]) / (done - self.first[1])

    def line(self, done: int, at: float, now: float, final: bool = False) -> str:
        """The text shown for `done` steps at position `at` (steps, or budget seconds)."""
        pos = min(max(at, 0), self.target)
        digits = len(str(self.target))
        filled = int(self.width * pos / self.target)
        text = (f"{int(pos):{digits}d}/{self.target}{'s' if self.budget else ''} "
                f"[{'=' * filled}{'.' * (self.width - filled)}]")
        pace = self.pace(done, now)
        if final:
            text += f" {duration(now - self.start)}"
        elif pace is None:
            text += " compiling"
        else:
            left = self.target - pos if self.budget else pace * (self.target - pos)
            text += f" ETA {duration(left)}"
        if pace is not None:
            text += f" - {pace * 1000:.0f}ms/step" if pace < 1 else f" - {pace:.1f}s/step"
        for k, v in self.values.items():
            text += f" - {k}: {_value(v)}"
        return text

    def update(self, done: int, values: Sequence[tuple[str, float]] = (),
               at: float | None = None, final: bool = False) -> None:
        """After `done` steps (0 before the first): shows the line when `interval` has passed
        since the last one, when the first pace is known, and at the end (`final`). `at` is
        the position in the bar's unit when that is not steps (a budget's seconds)."""
        now = self.clock()
        if self.first is None and done >= 1:
            self.first = (now, done)
        self.values.update(values or ())
        if self.verbose < 1:
            return
        timed = self.pace(done, now) is not None
        due = (self._shown_at is None or now - self._shown_at >= self.interval or
               (timed and not self._shown_timed))
        if not (due or final):
            return
        self._shown_at, self._shown_timed = now, timed
        text = self.line(done, done if at is None else at, now, final)
        stream = self.stream
        if hasattr(stream, "isatty") and stream.isatty():
            pad = " " * max(0, self._width - len(text))
            stream.write("\r" + text + pad + ("\n" if final else ""))
        else:
            stream.write(text + "\n")
        self._width = len(text)
        stream.flush()
