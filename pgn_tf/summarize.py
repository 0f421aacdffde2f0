"""`python -m pgn_tf.summarize --model_dir DIR [TEXT | -] [--explain out.html|out.png]`

Prints the summary of one text (an argument, or standard input with `-` or no argument).
--explain writes See et al.'s visualisation: attention over the article for each output word,
with its generation probability p_gen.
"""

from __future__ import annotations

import argparse
import sys

import tensorflow as tf

from pgn_tf import config as config_lib
from pgn_tf import visualize
from pgn_tf.errors import UserError, run_cli
from pgn_tf.inference import Summarizer


def summarize(args) -> str:
    text = sys.stdin.buffer.read().decode("utf-8", "replace") if args.text in (None, "-") else args.text
    summarizer = Summarizer.from_model_dir(args.model_dir, args.checkpoint)
    config_lib.apply_overrides(summarizer.cfg, args.set)
    verbose = bool(args.explain)
    out = summarizer.summarize(tf.constant([text]), beam_size=args.beam_size, verbose=verbose)
    summary = out["summaries"].numpy()[0].decode("utf-8")
    print(summary)
    if args.explain:
        n = int(out["length"][0])
        output = [t.decode() for t in out["tokens"].numpy()[0][:n]]
        source = [t.decode() for t in out["source_tokens"].numpy()[0] if t]
        attn = out["attention"].numpy()[0][:n, : len(source)]
        p_gen = out["p_gen"].numpy()[0][:n] if summarizer.cfg.model.pointer_gen else None
        if args.explain.endswith(".png"):
            visualize.write_png(args.explain, visualize.attention_image(attn, p_gen, scale=16))
        elif args.explain.endswith((".html", ".htm")):
            with open(args.explain, "w", encoding="utf-8") as f:
                f.write(visualize.attention_html(source, output, attn, p_gen))
        else:
            raise UserError(f"--explain {args.explain}: use a .html or .png file name")
        print(f"[pgn_tf] wrote {args.explain}", file=sys.stderr)
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.summarize", description=__doc__.splitlines()[0])
    p.add_argument("text", nargs="?", help="the text, or - (default) for standard input")
    p.add_argument("--model_dir", required=True)
    p.add_argument("--beam_size", type=int)
    p.add_argument("--checkpoint", default="best",
                   help="best (default), latest, or a checkpoint path such as DIR/ckpt/ckpt-3000")
    p.add_argument("--explain", metavar="OUT.html|OUT.png")
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.summarize", summarize, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
