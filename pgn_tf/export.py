"""`python -m pgn_tf.export --model_dir DIR --export_base BASE --name NAME [--version N]`

Writes a SavedModel to BASE/NAME/VERSION/ for TF Serving: raw text in, summary out, with
tokenization, vocab lookup, OOV mapping, beam search and detokenization inside the graph.

Signatures (DESIGN.md):
  serving_default      articles string [batch] -> summaries string [batch], scores float [batch]
  summarize_verbose    articles -> summaries, scores, tokens [batch, dec], attention
                       [batch, dec, enc], p_gen [batch, dec], raw_summaries and raw_tokens
                       (the output before decode.replace_unk)
  summarize_options    articles, beam_size, max_decode_steps, min_decode_steps (int32 scalars)
                       -> summaries, scores. TF Serving requires every input of a signature, so
                       the tunable scalars live in their own signature and serving_default
                       uses the checkpoint config's defaults.
The export is written to a temp dir, checked (reloaded and compared with in-process decoding),
then renamed into place, so a server polling BASE/NAME never sees half a model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import keras
import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf.errors import UserError, run_cli
from pgn_tf.inference import Summarizer

CHECK_ARTICLES = [
    "the council said on monday that the bridge near the station would be repaired .",
    "",
    "zorblax , a pilot from quenton , sold 5512 boxes of apples on friday .",
]


def build_archive(summarizer: Summarizer) -> keras.export.ExportArchive:
    archive = keras.export.ExportArchive()
    archive.track(summarizer.model)
    archive.track(summarizer.table)
    articles = tf.TensorSpec([None], tf.string, name="articles")
    scalar = lambda name: tf.TensorSpec([], tf.int32, name=name)  # noqa: E731

    @tf.function(input_signature=[articles])
    def serve(articles):
        out = summarizer.summarize(articles)
        return {"summaries": out["summaries"], "scores": out["scores"]}

    @tf.function(input_signature=[articles])
    def verbose(articles):
        out = summarizer.summarize(articles, verbose=True)
        return {k: out[k] for k in ("summaries", "scores", "tokens", "attention", "p_gen",
                                    "raw_summaries", "raw_tokens")}

    @tf.function(input_signature=[articles, scalar("beam_size"), scalar("max_decode_steps"),
                                  scalar("min_decode_steps")])
    def options(articles, beam_size, max_decode_steps, min_decode_steps):
        out = summarizer.summarize(articles, beam_size, max_decode_steps, min_decode_steps)
        return {"summaries": out["summaries"], "scores": out["scores"]}

    archive.add_endpoint("serving_default", serve)
    archive.add_endpoint("summarize_verbose", verbose)
    archive.add_endpoint("summarize_options", options)
    return archive


def verify(path: str, summarizer: Summarizer, articles: list[str]) -> None:
    """Reloads the export and checks it returns what in-process decoding returns."""
    loaded = tf.saved_model.load(path)
    got = loaded.signatures["serving_default"](articles=tf.constant(articles))["summaries"]
    want = summarizer.summarize(tf.constant(articles))["summaries"]
    got, want = got.numpy().tolist(), want.numpy().tolist()
    if got != want:
        raise RuntimeError(f"export check failed: SavedModel says {got}, in-process says {want}")


def export(model_dir: str, export_base: str, name: str, version: int | None = None,
           which: str = "best", check: bool = True, overrides: list[str] | None = None) -> str:
    """Writes the SavedModel; `overrides` ("decode.key=value") change the decoding defaults
    that serving_default bakes in (beam size, min/max steps, trigram blocking, ...)."""
    summarizer = Summarizer.from_model_dir(model_dir, which)
    for item in overrides or []:
        if not item.strip().startswith("decode."):
            raise UserError(f"export --set only changes decode.* keys, got '{item}'")
    config_lib.apply_overrides(summarizer.cfg, overrides)
    version = int(version if version is not None else time.time())
    if version <= 0:
        raise UserError(f"--version must be a positive integer, got {version}")
    final = os.path.join(export_base, name, str(version))
    if os.path.exists(final):
        raise UserError(f"{final} already exists; choose another --version")
    os.makedirs(os.path.join(export_base, name), exist_ok=True)
    # A non-numeric name: TF Serving and serving.server ignore it while it is being written.
    tmp = os.path.join(export_base, name, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build_archive(summarizer).write_out(tmp, verbose=False)
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        summarizer.cfg.save(os.path.join(extra, "config.json"))  # with the decode overrides
        shutil.copy(os.path.join(model_dir, "vocab.txt"), os.path.join(extra, "vocab.txt"))
        if check:
            verify(tmp, summarizer, CHECK_ARTICLES)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main_args(args) -> None:
    path = export(args.model_dir, args.export_base, args.name, args.version, args.checkpoint,
                  check=not args.no_check, overrides=args.set)
    print(path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.export", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--export_base", required=True)
    p.add_argument("--name", default="pgn")
    p.add_argument("--version", type=int, help="default: the current unix time")
    p.add_argument("--checkpoint", choices=("best", "latest"), default="best")
    p.add_argument("--no_check", action="store_true", help="skip the reload-and-compare check")
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE",
                   help="decoding default baked into the export (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.export", main_args, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
