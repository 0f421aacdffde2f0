"""`python -m pgn_tf.export --model_dir DIR --export_base BASE --name NAME [--version N]`

Writes a SavedModel to BASE/NAME/VERSION/ for TF Serving (raw text in, summary out) and prints
its path. The signatures, the serving contract inside the export and the checks run before it is
published: pgn_tf.saved_model.export.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.export"))
import argparse

from pgn_tf.saved_model.export import DEFAULT_MAX_BEAM_SIZE, DEFAULT_MAX_DECODE_STEPS, export
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.export", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--export_base", required=True)
    p.add_argument("--name", default="pgn")
    p.add_argument("--version", type=int, help="default: the current unix time")
    p.add_argument("--checkpoint", default="best",
                   help="best (default), latest, or a checkpoint path such as DIR/ckpt/ckpt-3000")
    p.add_argument("--no_check", action="store_true", help="skip the reload-and-compare check")
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE",
                   help="decoding default baked into the export (repeatable)")
    p.add_argument("--options_max_beam_size", type=int,
                   help=f"summarize_options' beam_size cap (default {DEFAULT_MAX_BEAM_SIZE}, or "
                        "the export's beam size if larger)")
    p.add_argument("--options_max_decode_steps", type=int,
                   help=f"summarize_options' max/min_decode_steps cap (default "
                        f"{DEFAULT_MAX_DECODE_STEPS}, or the export's max_dec_steps if larger)")
    add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("pgn_tf.export", lambda: print(export(
        args.model_dir, args.export_base, args.name, args.version, args.checkpoint,
        check=not args.no_check, overrides=args.set,
        options_max_beam_size=args.options_max_beam_size,
        options_max_decode_steps=args.options_max_decode_steps)))
