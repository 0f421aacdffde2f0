"""Importing pgn_tf changes nothing in the process beyond what importing its dependencies does:
no environment variable, no import hook, no logging filter, no process started, no sys.argv
read (STYLE.md: importing changes nothing; the commands' quiet start is pgn_tf.commands')."""

import ast
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["pgn_tf", "pgn_tf.inference.summarizer", "pgn_tf.evaluate", "pgn_tf.export", "pgn_tf.training",
           "pgn_tf.serving.server", "pgn_tf.pipelines.preprocess", "pgn_tf.train",
           "pgn_tf.summarize", "pgn_tf.commands", "pgn_tf.utils.quiet", "pgn_tf.data.synthetic",
           "pgn_tf.serving.client", "pgn_tf.pipelines.run", "pgn_tf.pipelines.summarize"]

# Prints the top-level names of the modules that importing MODULES imports, in import order.
DEPENDENCIES = """
import sys
for name in {modules!r}:
    __import__(name)
seen = []
for name in list(sys.modules):
    top = name.split(".")[0]
    if top not in seen and top != "pgn_tf" and not top.startswith("_"):
        seen.append(top)
print(repr(seen))
"""

# Imports the dependencies, takes the process's state, imports MODULES with sys.argv a list that
# records reads and subprocess.Popen recording starts, and prints what changed as JSON.
CHANGES = """
import json, logging, os, subprocess, sys
for name in {deps!r}:
    try:
        __import__(name)
    except Exception:
        pass

started = []
_init = subprocess.Popen.__init__
def recording_init(self, *args, **kwargs):
    started.append(str(args[0] if args else kwargs.get("args")))
    _init(self, *args, **kwargs)
subprocess.Popen.__init__ = recording_init

reads = []
class Argv(list):
    def __getitem__(self, i):
        reads.append(repr(i)); return list.__getitem__(self, i)
    def __iter__(self):
        reads.append("iter"); return list.__iter__(self)
    def __contains__(self, x):
        reads.append("in"); return list.__contains__(self, x)
    def __len__(self):
        reads.append("len"); return list.__len__(self)

def loggers():
    out = {{"": [type(f).__name__ for f in logging.getLogger().filters]}}
    for name, lg in logging.Logger.manager.loggerDict.items():
        if isinstance(lg, logging.Logger) and lg.filters:
            out[name] = [type(f).__name__ for f in lg.filters]
    return out

env, meta, hooks, filters = dict(os.environ), list(sys.meta_path), list(sys.path_hooks), loggers()
sys.argv = Argv(["host-program", "--verbose"])
for name in {modules!r}:
    __import__(name)
now = loggers()
print(json.dumps({{
    "env": sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)),
    "meta_path": [repr(f) for f in sys.meta_path if f not in meta],
    "path_hooks": [repr(h) for h in sys.path_hooks if h not in hooks],
    "logging_filters": {{k: v for k, v in now.items() if filters.get(k) != v}},
    "processes": started,
    "argv_reads": reads,
}}))
"""


def python(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                            "PGN_TF_VERBOSE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=dict(env, PYTHONPATH=ROOT), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_importing_pgn_tf_changes_nothing_beyond_its_dependencies():
    deps = ast.literal_eval(python(DEPENDENCIES.format(modules=MODULES)))
    assert "tensorflow" in deps and "apache_beam" in deps and "grpc" in deps
    changes = json.loads(python(CHANGES.format(deps=deps, modules=MODULES)))
    assert changes == {"env": [], "meta_path": [], "path_hooks": [], "logging_filters": {},
                       "processes": [], "argv_reads": []}, changes
