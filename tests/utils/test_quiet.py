"""pgn_tf.utils.quiet: the commands start without TensorFlow's noise, --verbose and PGN_TF_VERBOSE=1
leave everything on, and messages not on the known list still show."""

import os
import signal
import subprocess
import sys

import pytest

from pgn_tf.utils import quiet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOISE = ["absl::InitializeLog", "oneDNN custom operations", "cpu_feature_guard",
         "unsaved custom gradients", "apitools not found", "Resource module is not available"]
if not quiet.has_nvidia_device():
    NOISE += ["Could not find cuda drivers", "failed call to cuInit"]

# The state start() leaves, printed by a child process as one line.
STATE = """
import logging, os, sys
import pgn_tf.summarize  # an entry point that imports TensorFlow only when it needs it
from pgn_tf.utils import quiet
{start}
{after}
print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"), os.environ.get("PGN_TF_VERBOSE"),
      any(isinstance(f, quiet._QuietTensorFlowImport) for f in sys.meta_path),
      bool(logging.getLogger().filters))
"""


def run(args: list[str], stdin: str | None = None, **env) -> subprocess.CompletedProcess:
    """Runs python ARGS as a user would: no TF_CPP_MIN_LOG_LEVEL (conftest sets one), no
    PGN_TF_VERBOSE, unless given in env."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.VERBOSE_ENV)}
    return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True,
                          timeout=300, env=dict(base, PYTHONPATH=ROOT, **env))


def assert_no_noise(stderr: str) -> None:
    assert not [n for n in NOISE if n in stderr], stderr


@pytest.mark.slow
@pytest.mark.parametrize("module", ["pgn_tf.train", "pgn_tf.serving.server"])
def test_help_starts_quietly(module):
    done = run(["-m", module, "--help"])
    assert done.returncode == 0 and "--verbose" in done.stdout, done.stderr
    assert_no_noise(done.stderr)
    assert done.stderr == ""


@pytest.mark.slow
def test_summarize_on_an_export_prints_the_summary_and_its_count_only(exported, tmp_path):
    """Loading the export used to log 'unsaved custom gradients' once per function."""
    _, _, path = exported
    articles = tmp_path / "articles.txt"
    articles.write_text("zorblax , a pilot from quenton , sold 5512 boxes of apples .\n")
    done = run(["-m", "pgn_tf.summarize", "--saved_model", path, "--input", str(articles),
                "--output", "-"])
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert_no_noise(done.stderr)
    assert done.stderr.startswith("[pgn_tf.summarize] 1 records") and \
        done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("how", ["import only", "quiet", "--verbose", "PGN_TF_VERBOSE=1",
                                 "main --verbose", "own TF_CPP_MIN_LOG_LEVEL"])
def test_start_installs_its_filters_unless_verbose(how):
    """Asserts on what start() installed, not on TensorFlow's lines (which vary by machine); an
    import alone installs nothing (tests/test_imports.py checks every module)."""
    after = ("pgn_tf.summarize.build_parser().parse_args(['--verbose', 'text'])"
             if how == "main --verbose" else "")
    start = "" if how == "import only" else "quiet.start()"
    args = ["-c", STATE.format(start=start, after=after)] + (
        ["--verbose"] if how == "--verbose" else [])
    env = {"PGN_TF_VERBOSE=1": {"PGN_TF_VERBOSE": "1"},
           "own TF_CPP_MIN_LOG_LEVEL": {"TF_CPP_MIN_LOG_LEVEL": "0"}}.get(how, {})
    done = run(args, **env)
    assert done.returncode == 0, done.stderr
    expected = {"import only": "None None False False", "quiet": "1 None True True",
                "own TF_CPP_MIN_LOG_LEVEL": "0 None True True"}
    assert done.stdout.split("\n")[0] == expected.get(how, "None 1 False False")


@pytest.mark.slow
def test_real_warnings_still_show():
    code = """
import logging, warnings
from pgn_tf.utils import quiet
quiet.start()  # as a command does
import absl.logging
import tensorflow as tf

warnings.warn("something real")
tf.get_logger().warning("a real tensorflow warning")
absl.logging.warning("a real absl warning")
logging.warning("a real root warning")
absl.logging.warning("Importing a function (%s) with ops with unsaved custom gradients. Will "
                     "likely fail if a gradient is requested.", "__inference_f_1")
logging.warning("apitools not found, and bigquery client libraries are not available despite "
                "the import not raising an ImportError.")
"""
    done = run(["-c", code])
    assert done.returncode == 0, done.stderr
    for real in ("UserWarning: something real", "a real tensorflow warning", "a real absl warning",
                 "a real root warning"):
        assert real in done.stderr
    assert_no_noise(done.stderr)


def test_the_stderr_filter_passes_other_lines_on_even_when_the_process_aborts():
    """A CPU without AVX: TensorFlow's import prints a FATAL line and aborts inside the window."""
    code = r"""
import os
from pgn_tf.utils import quiet

with quiet.filtered_stderr(quiet.startup_noise()):
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                b"written to STDERR\n")
    os.write(2, b"I0000 00:00:1795613665.658712    4127 port.cc:153] oneDNN custom operations "
                b"are on. You may see slightly different numerical results.\n")
    os.write(2, b"W0000 00:00:1795613665.7    4127 some_kernel.cc:12] a real C++ warning\n")
    os.write(2, b"F0000 00:00:1795613665.8    4127 cpu_feature_guard.cc:1] The TensorFlow "
                b"library was compiled to use AVX instructions, but these aren't available")
    os.abort()
"""
    done = run(["-c", code])
    assert done.returncode == -signal.SIGABRT
    assert "a real C++ warning\n" in done.stderr and "AVX instructions" in done.stderr
    assert "absl::InitializeLog" not in done.stderr and "oneDNN" not in done.stderr


@pytest.mark.parametrize("gpu", [False, True])
def test_cuda_lines_are_hidden_only_without_an_nvidia_device(gpu, monkeypatch):
    monkeypatch.setattr(quiet, "has_nvidia_device", lambda: gpu)
    noise = quiet.startup_noise()
    cuinit = (b"E0000 00:00:1795613792.498937    6598 cuda_platform.cc:52] failed call to "
              b"cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
    drivers = (b"I0000 00:00:1795613665.659053    4127 cudart_stub.cc:31] Could not find cuda "
               b"drivers on your machine, GPU will not be used.")
    assert bool(noise.search(cuinit)) is not gpu and bool(noise.search(drivers)) is not gpu
    assert noise.search(b"I0000 00:00:1795613665.658712    4127 port.cc:153] oneDNN custom "
                        b"operations are on.")
    assert not noise.search(b"E0000 00:00:1795613792.4    6598 cuda_platform.cc:52] other")
