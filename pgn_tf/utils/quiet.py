"""A quiet start: a command prints what the user asked for, not TensorFlow's start-up noise.

Every command line calls start() before anything imports TensorFlow (pgn_tf.commands: the
console scripts and `python -m` alike) and registers `--verbose` with
`add_verbose_flag(parser)`. Importing this module changes nothing: a library user's process
(a notebook, a service, a test) keeps its own logging unless it calls start() itself.
`--verbose` on the command line, or PGN_TF_VERBOSE=1 in the environment, turns all of this off
and sets PGN_TF_VERBOSE=1 for the processes the command starts.

What is hidden on a CPU machine, each message where it arises, and why it is harmless there:

- TensorFlow's C++ INFO logs, through TF_CPP_MIN_LOG_LEVEL=1 (set only where the user has not
  set it): cpu_feature_guard's "This TensorFlow binary is optimized to use available CPU
  instructions ... rebuild TensorFlow" (its performance-critical kernels use them already;
  the rest would need a source build), tf.data's "TFRecordDataset `buffer_size` is
  unspecified" and the like. Level 1 is the narrowest that works: C++ WARNING and ERROR logs
  still show.
- Four lines that TF_CPP_MIN_LOG_LEVEL cannot hide (not even at 3). Three are logged through
  absl while the shared libraries load, before TensorFlow reads its log level (twice: the
  import loads _pywrap_cpu_feature_guard and the profiler plugin, each with its own copy), and
  cuInit's is an ERROR:
  - absl's "WARNING: All log messages before absl::InitializeLog() is called are written to
    STDERR": where the logs go, not a problem;
  - port.cc's "oneDNN custom operations are on. You may see slightly different numerical
    results ...": the kernels the commands start with on x86-64 CPUs (pgn_tf.utils.onednn),
    the numbers pgn_tf's tests and results use;
  - cudart_stub.cc's "Could not find cuda drivers on your machine, GPU will not be used." and
    cuda_platform.cc's "failed call to cuInit: ..." (when TensorFlow first lists the devices):
    a machine without a GPU has no CUDA driver. Both are hidden only where the machine has no
    NVIDIA device (/dev/nvidia0, WSL's /dev/dxg): there they explain why a GPU goes unused.
  They are dropped while `import tensorflow` and its first device listing run, wherever that
  import happens (an import hook; pgn_tf.summarize imports TensorFlow only once it needs it):
  for that window standard error is piped through a small filter process that drops exactly
  these lines and passes every other byte on. A process, not a thread: if the import dies (a
  CPU without AVX aborts with a FATAL line), the filter still forwards what was written.
- Python log records, matched on their message, from the logger that writes them:
  - absl's "Importing a function (...) with ops with unsaved custom gradients. Will likely fail
    if a gradient is requested.", once per function when a SavedModel is loaded (summarize
    --saved_model, serving, the pipelines, export's check). pgn_tf exports are written without
    gradients on purpose (pgn_tf.export: inference only), and no loader asks for one;
  - Apache Beam's "apitools not found, and bigquery client libraries are not available ..."
    on import (the pipelines read and write files, never BigQuery) and RunInference's
    "Resource module is not available for current platform, memory usage cannot be fetched."
    (Beam's memory metric needs torch; the summaries do not depend on it).

Everything else still shows: other C++ warnings and errors, other log records, every Python
warning. A C++ warning that arises later, when TensorFlow optimizes a graph, is fixed where it
arises, not hidden. Grappler's loop optimizer, for one, warns "Skipping loop optimization for
Merge node with control input" for a cond that it proves but cannot prune. So the searches
(pgn_tf.decoding) build no such cond.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.abc
import importlib.util
import logging
import os
import re
import subprocess
import sys

VERBOSE_ENV = "PGN_TF_VERBOSE"
VERBOSE_FLAG = "--verbose"

# C++ lines on standard error while TensorFlow is imported, as bytes regexes: always harmless.
STARTUP_NOISE = (
    rb"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    rb"^I\d{4} [^\]]* port\.cc:\d+\] oneDNN custom operations are on\.",
)
# ... and harmless where the machine has no GPU for CUDA to find.
NO_GPU_NOISE = (
    rb"^I\d{4} [^\]]* cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
    rb"^E\d{4} [^\]]* cuda_platform\.cc:\d+\] failed call to cuInit: ",
)
# Python log records: logger name -> the starts of their (unformatted) messages.
LOG_NOISE = {
    "absl": ("Importing a function (%s) with ops with unsaved custom gradients.",),
    "": ("apitools not found, and bigquery client libraries are not available",  # the root
         "Resource module is not available for current platform, memory usage cannot be"),
}

# Reads standard input line by line and writes to standard error the lines that do not match
# the pattern argv[1]; runs as `python -I -S -c` (no site packages, no environment: a fast start).
# It ignores Ctrl-C, which the terminal sends it too: it ends when the command closes the pipe.
_FILTER_PROGRAM = """
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise = re.compile(sys.argv[1].encode("latin-1"))
for line in sys.stdin.buffer:
    if not noise.search(line):
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
"""

_changed: dict = {"env": False, "finder": None, "filters": []}  # what start() did, for loud()


def is_verbose(argv: list[str] | None = None, environ=os.environ) -> bool:
    """Whether the user asked for everything: `--verbose` in argv (default sys.argv[1:], up to a
    `--`), or PGN_TF_VERBOSE set to anything but "", 0, false or no."""
    args = sys.argv[1:] if argv is None else argv
    args = args[:args.index("--")] if "--" in args else args
    value = environ.get(VERBOSE_ENV, "").strip().lower()
    return VERBOSE_FLAG in args or value not in ("", "0", "false", "no")


def has_nvidia_device() -> bool:
    """An NVIDIA GPU's device node (/dev/nvidia0, ...; WSL2's /dev/dxg): CUDA messages matter."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/dxg")


def startup_noise() -> re.Pattern:
    """One bytes regex for the C++ start-up lines hidden on this machine."""
    patterns = STARTUP_NOISE + (() if has_nvidia_device() else NO_GPU_NOISE)
    return re.compile(b"|".join(b"(?:" + p + b")" for p in patterns))


@contextlib.contextmanager
def filtered_stderr(noise: re.Pattern):
    """Within the block, file descriptor 2 (C++ logs and Python's sys.stderr alike) goes
    through a filter process that drops the lines matching `noise` and passes the rest on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no standard error to filter
        yield
        return
    try:
        filt = subprocess.Popen([sys.executable, "-I", "-S", "-c", _FILTER_PROGRAM,
                                 noise.pattern.decode("latin-1")],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    except (OSError, ValueError):  # no sys.executable (an embedded interpreter): unfiltered
        os.close(saved)
        yield
        return
    os.dup2(filt.stdin.fileno(), 2)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        filt.stdin.close()
        # The filter exits once it has written everything; a process started within the block
        # that still holds the pipe would keep it open: then go on without it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            filt.wait(timeout=10)


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """On the first `import tensorflow` (or of anything under it): runs the package's import
    and its first device listing, where cuInit is called, under filtered_stderr(). It stays in
    place until the package is imported: a lookup alone (`importlib.util.find_spec`, which
    finds the package's folder without importing it) leaves it for the import."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow" or self not in sys.meta_path:
            return None
        where = sys.meta_path.index(self)
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)  # the real one, from the other finders
        finally:
            sys.meta_path.insert(where, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _FilteredLoader(spec.loader)
        return spec


class _FilteredLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        _remove_finder()
        module.__spec__.loader = module.__loader__ = self.loader  # the module keeps the real one
        with filtered_stderr(startup_noise()):
            self.loader.exec_module(module)
            with contextlib.suppress(Exception):  # a listing that fails will fail again later
                module.config.list_physical_devices()
        _filter_logs("absl")  # absl.logging is in now; its logger has absl's own class


class _DropKnown(logging.Filter):
    """Drops the records whose unformatted message starts with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.prefixes))


def _filter_logs(name: str) -> None:
    logger = logging.getLogger(name)
    if not any(isinstance(f, _DropKnown) for f in logger.filters):
        f = _DropKnown(LOG_NOISE[name])
        logger.addFilter(f)
        _changed["filters"].append((logger, f))


def _remove_finder() -> None:
    finder, _changed["finder"] = _changed["finder"], None
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def start(argv: list[str] | None = None) -> None:
    """Quiets the start (see the module docstring) unless is_verbose(argv); a command calls it
    first (pgn_tf.commands.run_command). Calling it again changes nothing more."""
    if is_verbose(argv):
        os.environ[VERBOSE_ENV] = "1"  # the commands this one starts are verbose too
        return
    if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
        _changed["env"] = True
    _filter_logs("")
    if "absl.logging" in sys.modules:
        _filter_logs("absl")
    if "tensorflow" not in sys.modules and _changed["finder"] is None:
        _changed["finder"] = _QuietTensorFlowImport()
        sys.meta_path.insert(0, _changed["finder"])


def loud() -> None:
    """Undoes start() where it still can (what TensorFlow's import printed is gone), and makes
    the commands this process starts verbose: what `--verbose` parsed from `main(argv)` does."""
    os.environ[VERBOSE_ENV] = "1"
    if _changed["env"]:
        os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        _changed["env"] = False
    _remove_finder()
    for logger, f in _changed["filters"]:
        logger.removeFilter(f)
    _changed["filters"].clear()


class _VerboseAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)
        loud()


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """Registers `--verbose` (read from the command's argv by start(), before argparse runs)."""
    parser.add_argument(VERBOSE_FLAG, action=_VerboseAction,
                        help=f"also show TensorFlow's start-up logs and the warnings known to be "
                             f"harmless (pgn_tf/utils/quiet.py); {VERBOSE_ENV}=1 does the same")
