"""`python -m pgn_tf.quickstart`: the whole system end to end on the bundled synthetic corpus.

1. trains the `tiny` pointer-generator (a couple of minutes on 2 CPU cores),
2. summarizes a few validation articles and scores 200 with ROUGE,
3. exports a SavedModel to <workdir>/export/pgn/<version>/,
4. starts serving.server on free loopback ports, sends one gRPC request with the stock
   tensorflow-serving-api stubs, prints the answer and stops the server.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.quickstart"))
import argparse
import json
import os

import tensorflow as tf

from pgn_tf.data import dataset
from pgn_tf.inference.evaluator import ModelDirSource, evaluate
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.saved_model import export
from pgn_tf.training.run import train
from pgn_tf.utils import logs
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def walk_through(workdir: str, overrides: list[str]) -> None:
    """The four steps, each printed as it runs: what the command shows is its result, so this
    one, unlike the other commands' library calls, prints. Each step is one library call."""
    model_dir = os.path.join(workdir, "model")
    print(f"== 1. training the tiny pointer-generator in {model_dir}")
    train(model_dir, "tiny", overrides)

    print("\n== 2. summarizing validation articles")
    valid = os.path.join(model_dir, "synthetic", "validation-00000-of-00001.tfrecord")
    examples = dataset.read_split(valid, None, 3)
    summarizer = Summarizer.from_model_dir(model_dir)
    out = summarizer.summarize(tf.constant([e.article for e in examples]))
    for ex, s in zip(examples, out["summaries"].numpy()):
        print(f"article:   {ex.article[:110]}...\nreference: {ex.summary}\nsummary:   {s.decode()}\n")
    result = evaluate(ModelDirSource(model_dir), valid, limit=200, progress=False)
    print(json.dumps(result.metrics))

    print("\n== 3. exporting the SavedModel")
    base = os.path.join(workdir, "export")
    path = export.export(model_dir, base, "pgn")
    print(path)

    print("\n== 4. serving it and sending one gRPC request")
    from pgn_tf.serving.client import summarize
    from pgn_tf.serving.process import start_server, stop_server

    proc, grpc_port, rest_port = start_server(os.path.join(base, "pgn"), "pgn")
    try:
        article = examples[0].article
        answer = summarize(f"localhost:{grpc_port}", "pgn", [article])[0]
        print(f"server on localhost:{grpc_port} (REST {rest_port}) answered: {answer}")
    finally:
        stop_server(proc)
    print("\nquickstart done: model, export and TensorBoard logs in", workdir)
    print(f"  tensorboard --logdir {model_dir}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.quickstart",
                                description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="runs/quickstart")
    p.add_argument("--set", action="append", default=[], help="config overrides for training")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    with logs.to_stdout():  # training's lines ([pgn_tf] ...) between the steps
        return run_cli("pgn_tf.quickstart", walk_through, a.workdir, a.set)
