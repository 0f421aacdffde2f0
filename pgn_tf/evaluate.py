"""`python -m pgn_tf.evaluate`: decode a split and score it.

    python -m pgn_tf.evaluate --model_dir DIR --data PATH [--limit N] [--beam_size K]
        [--output_dir OUT] [--set decode.block_trigrams=true]
    python -m pgn_tf.evaluate --saved_model EXPORT/NAME/VERSION --data PATH   # what it serves
    python -m pgn_tf.evaluate --baseline lead --lead_sentences 3 --data PATH   # no model
    python -m pgn_tf.evaluate --baseline lead_blocks --data PATH   # digests: no model
    python -m pgn_tf.evaluate --decoded OUT.txt --data PATH   # another system's outputs

Reports ROUGE-1/2/Lsum F1 (rouge-score, stemmed, sentences on separate lines for rougeLsum,
bootstrap 95% intervals), average summary length, % duplicate 1-4-grams and sentences (See et
al. Fig. 4), % novel 1-4-grams w.r.t. the article (Fig. 6), mean p_gen, [UNK] rate (after and
before decode.replace_unk), and the shares of outputs that repeat a token and that repeat a
word (word tokens only, punctuation excluded), each beside the references' own rate. On
digests (articles of blank-line-separated blocks, one reference line per block), the block
measures of `pgn_tf.digest_metrics` too: blocks covered, sentences repeated, blocks revisited.
Baselines without a model: `lead` (the first --lead_sentences sentences, or --lead_words
words) and `lead_blocks` (the first sentence of each block the model would read).
`--decoded FILE` scores another system's outputs instead (one summary a line, in the order of
the data, retokenized with this project's tokenizer), every measure computed the same way.
`--rouge_recall_bytes 75` adds DUC-style ROUGE recall of the decoded summaries cut to their first
75 bytes (Rush et al. 2015's protocol). Writes decoded.jsonl, decoded.txt, reference.txt and
metrics.json to --output_dir (default <model_dir>/eval_<split name>).

The library call underneath is `pgn_tf.evaluation.evaluate`; the measures are pgn_tf.scoring's.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.evaluate"))
import argparse
import json

from pgn_tf.data import dataset
from pgn_tf.evaluation import Evaluation, evaluate
from pgn_tf.scoring import BASELINES
from pgn_tf.utils.errors import run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir")
    p.add_argument("--saved_model", metavar="VERSION_DIR",
                   help="score an export's summaries (its summarize_verbose signature) instead "
                        "of a model dir's")
    p.add_argument("--data", required=True)
    p.add_argument("--data_format", choices=dataset.FORMATS)
    p.add_argument("--limit", type=int)
    p.add_argument("--beam_size", type=int)
    p.add_argument("--batch_size", type=int)
    p.add_argument("--output_dir")
    p.add_argument("--checkpoint", default="best",
                   help="best (default), latest, or a checkpoint path such as DIR/ckpt/ckpt-3000")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--baseline", choices=BASELINES,
                   help="score a baseline instead of a model: lead (--lead_sentences or "
                        "--lead_words) or lead_blocks (digests: each block's first sentence)")
    p.add_argument("--decoded", metavar="FILE",
                   help="score these summaries (one a line, in the data's order) instead of a "
                        "model's")
    p.add_argument("--lead_sentences", type=int, default=3)
    p.add_argument("--lead_words", type=int)
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--rouge_recall_bytes", type=int, metavar="N",
                   help="also report ROUGE recall of the summaries cut to N bytes (DUC: 75)")
    p.add_argument("--quiet", action="store_true")
    add_verbose_flag(p)
    return p


def run(args) -> Evaluation:
    """The parsed flags -> `evaluate` (the library call); prints its metrics as one JSON line."""
    result = evaluate(
        args.data, args.model_dir, saved_model=args.saved_model, data_format=args.data_format,
        limit=args.limit, beam_size=args.beam_size, batch_size=args.batch_size, output_dir=args.output_dir,
        checkpoint=args.checkpoint, overrides=args.set, baseline=args.baseline,
        decoded=args.decoded, lead_sentences=args.lead_sentences, lead_words=args.lead_words,
        bootstrap=args.bootstrap, rouge_recall_bytes=args.rouge_recall_bytes,
        progress=not args.quiet)
    print(json.dumps(result.metrics))
    return result


def main(argv: list[str] | None = None) -> int:
    return run_cli("pgn_tf.evaluate", run, build_parser().parse_args(argv))
