"""The library logs, the commands print: the one handler that turns the library's log records
into a command's lines on standard output.

Library code logs on the logger "pgn_tf" (training, data) or on "pgn_tf.<part>" where its lines
name their part (the pipelines: "pgn_tf.pipelines.run"). A user's process gets the records and
decides where they go (the logging module's usual rules); a command's main() wraps its one
library call in `to_stdout()`, which shows each record of level INFO and up as one line,

    [pgn_tf] resumed from runs/pgn/ckpt/ckpt-20 (step 20)
    [pipelines.run] train: running

on whatever sys.stdout is when it is written (a test's redirect, a pipe), as print did.
"""

from __future__ import annotations

import contextlib
import logging
import sys

LOGGER = "pgn_tf"


class _Lines(logging.Formatter):
    """`[label] message`: the label is the logger's name below pgn_tf (pipelines.run), or
    pgn_tf itself. A record logged with extra={"newline": True} starts on a line of its own
    (after a progress bar's)."""

    def format(self, record: logging.LogRecord) -> str:
        label = record.name.removeprefix(LOGGER + ".") if record.name != LOGGER else LOGGER
        start = "\n" if getattr(record, "newline", False) else ""
        return f"{start}[{label}] {record.getMessage()}"


class _Current(logging.StreamHandler):
    """A StreamHandler on sys.stdout or sys.stderr as it is the moment each record is written
    (a test's redirect, a pipe)."""

    def __init__(self, name: str):
        self._which = name
        super().__init__(getattr(sys, name))

    @property
    def stream(self):
        return getattr(sys, self._which)

    @stream.setter
    def stream(self, _):  # StreamHandler.__init__ sets it; the stream is read at each write
        pass

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        self.flush()


def to_stdout(level: int = logging.INFO):
    """While inside: pgn_tf's records of `level` and up are written to standard output as
    `[label] message` lines, and not passed on to the root logger's handlers (a command's
    standard error stays for errors and warnings of other libraries)."""
    return _shown_on("stdout", level)


def to_stderr(level: int = logging.INFO):
    """to_stdout's lines on standard error: for a command whose standard output is its data
    (`pgn_tf.summarize` writes summaries there)."""
    return _shown_on("stderr", level)


@contextlib.contextmanager
def _shown_on(stream: str, level: int):
    logger = logging.getLogger(LOGGER)
    handler = _Current(stream)
    handler.setFormatter(_Lines())
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]
