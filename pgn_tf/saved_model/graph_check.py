"""What an export's graph may hold: only ops that core TensorFlow registers and that run without
Python, so that stock `tensorflow_model_server` (TensorFlow's C++ runtime, no Python, no
tensorflow-text kernels) loads and runs it.

A `tf.py_function` (op EagerPyFunc) or `tf.numpy_function` (PyFunc) in a signature loads in
any Python process and passes every Python test, then fails in TF Serving ("Python is not
available"); a tensorflow-text op (RegexSplitWithOffsets, ...) loads only where tensorflow-text
is imported. `unservable_ops` lists every op of a SavedModel's graph and of every function in its
library (a signature's body lives in functions) and returns those that are neither: it asks a
fresh process that imports TensorFlow alone which ops are registered (the exporting process may
have imported tensorflow-text, whose ops would then look registered).
"""

from __future__ import annotations

import os
import subprocess
import sys

# Ops that core TensorFlow registers but whose kernels call back into Python.
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

# Prints the names of every op registered in a process that imported TensorFlow alone.
_CORE_OPS = """
from tensorflow.python.client import pywrap_tf_session as s
from tensorflow.core.framework import op_def_pb2
buf = s.TF_GetAllOpList()
print("\\n".join(sorted(o.name for o in op_def_pb2.OpList.FromString(s.TF_GetBuffer(buf)).op)))
"""


def saved_model_ops(path: str) -> dict[str, str]:
    """{op type: where it first appears} over the "serve" graph of the SavedModel at `path`,
    its functions included ("graph" or "function NAME")."""
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm = saved_model_pb2.SavedModel.FromString(f.read())
    graphs = [m for m in sm.meta_graphs if "serve" in m.meta_info_def.tags] or sm.meta_graphs[:1]
    where: dict[str, str] = {}
    for meta in graphs:
        for node in meta.graph_def.node:
            where.setdefault(node.op, "graph")
        for fn in meta.graph_def.library.function:
            for node in fn.node_def:
                where.setdefault(node.op, f"function {fn.signature.name}")
    return where


def core_ops() -> frozenset[str]:
    """The ops registered in a fresh Python process that imports only TensorFlow."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", _CORE_OPS], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"listing TensorFlow's registered ops failed: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return frozenset(done.stdout.split())


def unservable_ops(path: str, registered: frozenset[str] | None = None) -> dict[str, str]:
    """{op: where} of the SavedModel's ops that TF Serving cannot run: not in `registered`
    (default: core_ops()) or calling Python (PYTHON_OPS). Empty for a servable export."""
    registered = core_ops() if registered is None else registered
    return {op: where for op, where in sorted(saved_model_ops(path).items())
            if op in PYTHON_OPS or op not in registered}


def describe(bad: dict[str, str]) -> str:
    """One line naming each unservable op, where it is and why."""
    return "; ".join(f"{op} ({'calls Python' if op in PYTHON_OPS else 'not a core op'}, in "
                     f"{where})" for op, where in bad.items())
