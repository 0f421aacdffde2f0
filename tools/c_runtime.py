"""An export run in TensorFlow's C runtime, the one stock `tensorflow_model_server` embeds, in a
process with no Python: evidence that the export serves there unchanged, where that server
cannot be installed.

    python -m tools.c_runtime --saved_model EXPORT/pgn/1 "some article text ."

`build()` compiles tools/saved_model_run.c with the C compiler (`cc`, or $CC) against the
installed TensorFlow wheel's C API (its include/ folder and libtensorflow_cc.so.2);
`run_signature()` feeds a signature's inputs by the tensor names of its SignatureDef, as TF
Serving does, and parses what the program prints; `registered_ops()` lists the ops the C
runtime registers. What this shows and does not show: docs/serving/stock-model-server.md.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("tools.c_runtime"))
import argparse
import os
import shutil
import subprocess
import tempfile

from pgn_tf.saved_model.contract import ARTICLES, SERVING_DEFAULT
from pgn_tf.utils.quiet import add_verbose_flag

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "saved_model_run.c")


def tensorflow_dir() -> str:
    """The installed tensorflow package's folder (headers in include/, the C API's library)."""
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("tensorflow is not installed")
    return list(spec.submodule_search_locations)[0]


def compiler() -> str | None:
    """$CC, else cc or gcc on the PATH; None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build(out_dir: str) -> str:
    """Compiles the runner into out_dir; returns the binary's path. RuntimeError naming what is
    missing (no compiler, no C API in the wheel) or what the compiler said."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (install gcc, or set CC)")
    tf_dir = tensorflow_dir()
    lib = os.path.join(tf_dir, "libtensorflow_cc.so.2")
    for needed in (os.path.join(tf_dir, "include", "tensorflow", "c", "c_api.h"), lib):
        if not os.path.exists(needed):
            raise RuntimeError(f"the installed TensorFlow has no {needed}")
    binary = os.path.join(out_dir, "saved_model_run")
    done = subprocess.run(
        [cc, "-O1", "-o", binary, SOURCE, "-I", os.path.join(tf_dir, "include"), lib,
         os.path.join(tf_dir, "libtensorflow_framework.so.2"), f"-Wl,-rpath,{tf_dir}"],
        capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"compiling {SOURCE} failed: {done.stderr.strip()[-2000:]}")
    return binary


def registered_ops(binary: str) -> frozenset[str]:
    """The names of every op registered in the C runtime."""
    from tensorflow.core.framework import op_def_pb2

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ops.pb")
        _run([binary, "ops", path])
        with open(path, "rb") as f:
            return frozenset(op.name for op in op_def_pb2.OpList.FromString(f.read()).op)


def signature_def(export_dir: str, signature: str):
    """The SignatureDef of the "serve" graph of the SavedModel at export_dir."""
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm = saved_model_pb2.SavedModel.FromString(f.read())
    for meta in sm.meta_graphs:
        if "serve" in meta.meta_info_def.tags and signature in meta.signature_def:
            return meta.signature_def[signature]
    raise KeyError(f"{export_dir} has no signature '{signature}' in its serve graph")


def run_signature(binary: str, export_dir: str, signature: str, inputs: dict,
                  outputs: list[str] | None = None) -> dict:
    """Runs `signature` in the C runtime. inputs: {name: list of str/bytes (a string vector) or
    int (an int32 scalar)}; outputs: the output names to fetch (default all). Returns
    {output: list of bytes, floats or ints}, flattened."""
    sig = signature_def(export_dir, signature)
    if set(inputs) != set(sig.inputs):
        raise ValueError(f"signature '{signature}' takes {sorted(sig.inputs)}, got "
                         f"{sorted(inputs)}")
    outputs = outputs or sorted(sig.outputs)
    blocks = []
    for name, value in inputs.items():
        op, index = sig.inputs[name].name.rsplit(":", 1)
        if isinstance(value, int):
            blocks.append(f"input {op} {index} int32 {value}\n".encode())
            continue
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in value]
        blocks.append(f"input {op} {index} string {len(items)}\n".encode())
        blocks.extend(b"%d\n%s\n" % (len(v), v) for v in items)
    fetch = [sig.outputs[name].name for name in outputs]
    with tempfile.TemporaryDirectory() as tmp:
        feed = os.path.join(tmp, "inputs")
        with open(feed, "wb") as f:
            f.write(b"".join(blocks))
        out = _run([binary, "run", export_dir, feed, *fetch])
    return dict(zip(outputs, _parse(out)))


def _run(argv: list[str]) -> bytes:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    done = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    if done.returncode != 0:  # the program's own line, and the message lines TF adds after it
        err = done.stderr.decode(errors="replace")
        start = err.rfind("saved_model_run:")
        text = " ".join(err[start:].split()) if start >= 0 else f"exit status {done.returncode}"
        raise RuntimeError(f"{os.path.basename(argv[0])} {argv[1]} failed: {text[:1500]}")
    return done.stdout


def _parse(out: bytes) -> list[list]:
    """The runner's standard output -> one list of values per output."""
    results, pos = [], 0

    def line() -> bytes:
        nonlocal pos
        end = out.index(b"\n", pos)
        text, pos = out[pos:end], end + 1
        return text

    while pos < len(out):
        _, _, kind, count = line().split()
        values = []
        for _ in range(int(count)):
            if kind == b"string":
                size = int(line())
                values.append(out[pos:pos + size])
                pos += size + 1
            elif kind == b"float":
                values.append(float(line()))
            else:
                values.append(int(line()))
        results.append(values)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.c_runtime",
                                description=__doc__.splitlines()[0])
    p.add_argument("--saved_model", required=True, help="a version dir: EXPORT/NAME/VERSION")
    p.add_argument("articles", nargs="+")
    add_verbose_flag(p)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            binary = build(tmp)
            out = run_signature(binary, args.saved_model, SERVING_DEFAULT,
                                {ARTICLES: args.articles}, ["summaries", "scores"])
        except (RuntimeError, KeyError, ValueError) as e:
            print(f"tools.c_runtime: error: {e}")
            return 2
    for summary, score in zip(out["summaries"], out["scores"]):
        print(f"{score:.4f}\t{summary.decode(errors='replace')}")
    return 0
