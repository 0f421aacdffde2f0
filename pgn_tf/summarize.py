"""`python -m pgn_tf.summarize`: summaries of one text, or of a whole file of articles.

    python -m pgn_tf.summarize --model_dir DIR [TEXT | -] [--explain out.html|out.png]
    python -m pgn_tf.summarize --model_dir DIR | --saved_model PATH --input FILE --output FILE
        [--format text|jsonl] [--on_error skip|stop] [--batch_size N] [--quiet]

One text (an argument, or standard input with `-` or no argument): prints its summary;
--explain writes See et al.'s visualisation, the attention over the article for each output
word with its generation probability p_gen.

A file (`--input`, `-` for standard input; `.gz` is read compressed): plain text holds one
article a line and gives one summary a line; JSON Lines hold objects with an `article` field
and give the same objects with `summary` added (`--output_field`), every other field copied
through. The format follows the file name (`.jsonl`, `.jsonl.gz`, `.json`), else the first line
(an object is JSONL), unless --format says. Articles are decoded by the compiled
`Summarizer` in batches of similar length (a window of 16 batches is read, sorted by length,
decoded, and written back in input order), with a progress bar on standard error.

A line that is not UTF-8, not JSON, not a JSON object or has no `article` string (an empty
line, in plain text) is reported on standard error with its line number; `--on_error skip`
(default) goes on without it, `--on_error stop` stops there after writing the rows before it.
The output has one row per good input record, in input order. Resumable: the rows already in
`--output` are kept and their records skipped (a row cut short by a kill is removed first), so
running the same command again finishes the job.

A model dir's tuned ABS+ weights (abs_plus.json, pgn_tf.tune) are used unless --set
decode.abs_plus_weights=... overrides them; a `[pgn_tf]` line on standard error says which. The
library calls underneath are pgn_tf.inference.loading.load_summarizer and
pgn_tf.inference.corpus (summarize_text, summarize_corpus).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.summarize"))
import argparse
import sys

from pgn_tf.inference import corpus
from pgn_tf.utils import logs
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pgn_tf.summarize",
                                description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:5]))
    p.add_argument("text", nargs="?", help="one text, or - (default) for standard input")
    p.add_argument("--model_dir", help="a training model dir (decoded in process, compiled)")
    p.add_argument("--saved_model", help="an exported version dir, BASE/NAME/VERSION")
    p.add_argument("--input", help="a file of articles (text or JSONL, .gz too), or - for stdin")
    p.add_argument("--output", help="where the summaries go (appended to: resumable), or -")
    p.add_argument("--format", choices=("text", "jsonl"),
                   help="the input's format (default: by file name, else by the first line)")
    p.add_argument("--on_error", choices=("skip", "stop"), default="skip",
                   help="a bad input line is reported and skipped (default) or stops the run")
    p.add_argument("--field", default="article", help="JSONL field holding the article")
    p.add_argument("--output_field", default="summary", help="JSONL field the summary goes to")
    p.add_argument("--batch_size", type=int,
                   help="articles per model call (default and maximum: decode.batch_size)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="the progress bar on standard error (auto: when it is a terminal)")
    p.add_argument("--beam_size", type=int)
    p.add_argument("--checkpoint", default="best",
                   help="best (default), latest, or a checkpoint path such as DIR/ckpt/ckpt-3000")
    p.add_argument("--explain", metavar="OUT.html|OUT.png")
    p.add_argument("--set", action="append", default=[], metavar="decode.KEY=VALUE")
    add_verbose_flag(p)
    return p


def check_flags(a: argparse.Namespace) -> None:
    """UserError for flags that do not go together."""
    if a.input is None:
        if a.output or a.saved_model:
            raise UserError("--output and --saved_model go with --input FILE")
        if not a.model_dir:
            raise UserError("give --model_dir (a single text is decoded in process)")
        return
    if a.text is not None or a.explain:
        raise UserError("with --input, give no TEXT and no --explain (explain one text at a "
                        "time, or use Summarizer.explain)")
    if not a.output:
        raise UserError("--input needs --output (a file, or - for standard output)")
    corpus.check_paths(a.input, a.output)
    if a.saved_model and a.beam_size:
        raise UserError("--beam_size needs --model_dir (an export's decoding settings are "
                        "fixed: python -m pgn_tf.export --set ...)")


def main(argv: list[str] | None = None) -> int:
    """Parses the flags, loads the summarizer and calls pgn_tf.inference.corpus with them:
    prints one text's summary, or the batch form's counts on standard error; 2 on an error the
    user can fix."""
    a = build_parser().parse_args(argv)
    if a.batch_size is not None and a.batch_size <= 0:
        print("pgn_tf.summarize: error: --batch_size must be positive", file=sys.stderr)
        return 2

    def run() -> None:
        from pgn_tf.decoding.search import DecodeRequest
        from pgn_tf.inference.loading import load_summarizer

        check_flags(a)
        summarizer = load_summarizer(a.model_dir, a.saved_model, checkpoint=a.checkpoint,
                                     overrides=a.set)
        request = DecodeRequest(beam_size=a.beam_size or None)
        if a.input is None:
            text = (sys.stdin.buffer.read().decode("utf-8", "replace")
                    if a.text in (None, "-") else a.text)
            print(corpus.summarize_text(summarizer, text, request=request, explain=a.explain))
            return
        counts = corpus.summarize_corpus(
            summarizer, a.input, a.output, fmt=a.format, field=a.field,
            output_field=a.output_field, batch_size=a.batch_size, request=request,
            on_error=a.on_error, progress=a.progress)
        print(f"[pgn_tf.summarize] {counts.line()}", file=sys.stderr)

    with logs.to_stderr():
        return run_cli("pgn_tf.summarize", run)
