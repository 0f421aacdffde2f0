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
word (word tokens only, punctuation excluded) and a content word (function words excluded),
novel words (output words absent from the article), each beside the references' own rate. On
digests (articles of blank-line-separated blocks, one reference line per block), the block
measures of `pgn_tf.metrics.digests` too: blocks covered, sentences repeated, blocks revisited.
Baselines without a model: `lead` (the first --lead_sentences sentences, or --lead_words
words) and `lead_blocks` (the first sentence of each block the model would read).
`--decoded FILE` scores another system's outputs instead (one summary a line, in the order of
the data, retokenized with this project's tokenizer), every measure computed the same way.
`--fluency_data TRAIN` adds fluency: the outputs' perplexity (and the references') under a
Kneser-Ney trigram model of the training split's reference summaries, a model of how
summaries are written that is neither the summarizer nor the RL reward.
`--rouge_recall_bytes 75` adds DUC-style ROUGE recall of the decoded summaries cut to their first
75 bytes (Rush et al. 2015's protocol). Writes decoded.jsonl, decoded.txt, reference.txt and
metrics.json to --output_dir (default <model_dir>/eval_<split name>).

The library call underneath is `pgn_tf.inference.evaluator.evaluate` (the one evaluator), given
the source the flags name (a model dir, an export, a baseline or a decoded file); the measures
are pgn_tf.metrics'. A flag that does not apply to that source is refused. A model dir's tuned ABS+ weights (abs_plus.json, pgn_tf.tune) are
used unless --set decode.abs_plus_weights=... overrides them; a `[pgn_tf]` line says which.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.evaluate"))
import argparse
import json

from pgn_tf.data.articles import EXAMPLE_FORMATS
from pgn_tf.inference.evaluator import (
    BaselineSource,
    DecodedFileSource,
    ExportSource,
    ModelDirSource,
    Source,
    evaluate,
)
from pgn_tf.metrics.scoring import BASELINES
from pgn_tf.utils import logs
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model_dir")
    p.add_argument("--saved_model", metavar="VERSION_DIR",
                   help="score an export's summaries (its summarize_verbose signature) instead "
                        "of a model dir's")
    p.add_argument("--data", required=True)
    p.add_argument("--data_format", choices=EXAMPLE_FORMATS)
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
    p.add_argument("--fluency_data", metavar="TRAIN_PATH",
                   help="the training split: an n-gram model of its reference summaries scores "
                        "the outputs' fluency (fluency_ppl; pgn_tf.metrics.fluency)")
    p.add_argument("--quiet", action="store_true")
    add_verbose_flag(p)
    return p


def refuse_unused(a: argparse.Namespace, flags: tuple[str, ...], source: str, why: str) -> None:
    """UserError naming the first of flags given that the source does not use."""
    for flag in flags:
        if getattr(a, flag) not in (None, []):
            raise UserError(f"--{flag} does not apply to {source}: {why}")


def source_from_flags(a: argparse.Namespace) -> Source:
    """The one source the flags name; UserError for two sources, none, or a flag that does not
    apply to the one named."""
    if a.baseline and a.decoded:
        raise UserError("give --baseline or --decoded, not both")
    if a.saved_model and a.model_dir:
        raise UserError("give --model_dir or --saved_model, not both")
    if a.baseline or a.decoded:
        named = f"--baseline {a.baseline}" if a.baseline else "--decoded"
        refuse_unused(a, ("saved_model", "beam_size", "batch_size"), named,
                      "it scores summaries without decoding")
        if a.decoded:
            refuse_unused(a, ("lead_words",), named, "it scores the file's summaries")
            return DecodedFileSource(a.decoded, a.model_dir, a.set)
        words = a.lead_words is not None or a.baseline != "lead"
        return BaselineSource(a.baseline, lead_sentences=None if words else a.lead_sentences,
                              lead_words=a.lead_words, model_dir=a.model_dir, overrides=a.set)
    refuse_unused(a, ("lead_words",), "a model's summaries", "it applies to --baseline lead")
    if a.saved_model:
        refuse_unused(a, ("set", "beam_size"), "an export", "its decoding is in its graph")
        return ExportSource(a.saved_model, a.batch_size)
    if not a.model_dir:
        raise UserError("--model_dir or --saved_model is required unless --baseline or "
                        "--decoded is given")
    return ModelDirSource(a.model_dir, a.checkpoint, a.set, a.beam_size, a.batch_size)


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, builds the source they name, calls
    pgn_tf.inference.evaluator.evaluate and prints its metrics as one JSON line; 2 on an error
    the user can fix."""
    a = build_parser().parse_args(argv)

    def run() -> None:
        result = evaluate(source_from_flags(a), a.data, data_format=a.data_format,
                          limit=a.limit, output_dir=a.output_dir, bootstrap=a.bootstrap,
                          rouge_recall_bytes=a.rouge_recall_bytes,
                          fluency_data=a.fluency_data, progress=not a.quiet)
        print(json.dumps(result.metrics))

    with logs.to_stdout():
        return run_cli("pgn_tf.evaluate", run)
