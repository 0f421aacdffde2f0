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
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: quiet start, then main() (pgn_tf.commands)
    from pgn_tf.commands import run_command

    raise SystemExit(run_command("pgn_tf.summarize"))
import argparse
import gzip
import json
import os
import sys
import time
from collections.abc import Iterator

from pgn_tf.data.lines import numbered_lines
from pgn_tf.utils.errors import UserError, run_cli
from pgn_tf.utils.quiet import add_verbose_flag

WINDOW_BATCHES = 16  # batches read ahead, sorted by length, decoded, then written in order
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


# -- the single-text form ---------------------------------------------------------------------


def summarize(args) -> str:
    """The single-text form (no --input): prints and returns the summary."""
    import tensorflow as tf

    from pgn_tf import config as config_lib
    from pgn_tf import visualize
    from pgn_tf.inference import Summarizer

    if not args.model_dir:
        raise UserError("give --model_dir (a single text is decoded in process)")
    text = (sys.stdin.buffer.read().decode("utf-8", "replace") if args.text in (None, "-")
            else args.text)
    summarizer = Summarizer.from_model_dir(args.model_dir, args.checkpoint)
    config_lib.apply_decode_overrides(summarizer.cfg, args.set, "summarize")
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


# -- reading records --------------------------------------------------------------------------


class BadLine(Exception):
    """A line that holds no article; the message says why."""


def _open_input(path: str):
    """A binary file object for `path` (`-`: standard input; `.gz`: decompressed)."""
    if path == "-":
        return sys.stdin.buffer
    if not os.path.isfile(path):
        raise UserError(f"--input {path} does not exist")
    f = open(path, "rb")  # noqa: SIM115  (closed by the caller)
    return gzip.GzipFile(fileobj=f) if path.endswith(".gz") else f


def raw_lines(f) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the line end) of a binary file; a damaged gzip ends it
    with (next line number, None)."""
    for lineno, raw in numbered_lines(f):
        yield lineno, None if isinstance(raw, Exception) else raw.rstrip(b"\r\n")


def detect_format(path: str, first_line: bytes | None) -> str:
    """jsonl or text: by the file name, else by the first line (an object is JSONL)."""
    if path != "-" and path.lower().endswith(JSONL_SUFFIXES):
        return "jsonl"
    return "jsonl" if first_line is not None and first_line.lstrip().startswith(b"{") else "text"


def parse_line(raw: bytes | None, fmt: str, field: str) -> dict | None:
    """One line -> a record holding the article at `field`; None for a blank JSONL line (not
    a record, as in pgn_tf.data.jsonl); BadLine for a line that holds no article."""
    if raw is None:
        raise BadLine("the gzip is damaged here: nothing after this point can be read")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadLine(f"not UTF-8 (byte {e.start})") from None
    if fmt == "text":
        if not line.strip():
            raise BadLine("empty line: no article")
        return {field: line}
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except RecursionError:
        raise BadLine("not JSON (nested too deeply)") from None
    except ValueError as e:
        raise BadLine(f"not JSON ({str(e)[:80]})") from None
    if not isinstance(record, dict):
        raise BadLine(f"not a JSON object (a {type(record).__name__})")
    if not isinstance(record.get(field), str):
        what = "no" if field not in record else f"a {type(record[field]).__name__} as its"
        raise BadLine(f"{what} '{field}' field" + ("" if field not in record else ", not text"))
    return record


# -- resuming -------------------------------------------------------------------------------


def rows_done(path: str) -> int:
    """Complete rows already in an output file; a last row cut short (no newline) is removed
    from the file. 0 when the file does not exist."""
    if path == "-" or not os.path.exists(path):
        return 0
    n, keep = 0, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            n, keep = n + 1, keep + len(line)
    if keep != os.path.getsize(path):
        with open(path, "r+b") as f:
            f.truncate(keep)
        print(f"[pgn_tf.summarize] {path}: removed a last row cut short", file=sys.stderr)
    return n


def count_lines(path: str) -> int | None:
    """Lines of the input, for the progress bar's total (None for standard input)."""
    if path == "-":
        return None
    n = 0
    try:
        with _open_input(path) as f:
            for n, _ in raw_lines(f):  # noqa: B007
                pass
    except OSError:
        return None
    return n


# -- the batch form -------------------------------------------------------------------------


def load_summarizer(args):
    """The compiled Summarizer of --model_dir, or the SavedModel's of --saved_model."""
    from pgn_tf import config as config_lib
    from pgn_tf.inference import Summarizer

    if bool(args.model_dir) == bool(args.saved_model):
        raise UserError("give one of --model_dir or --saved_model")
    if args.saved_model:
        if args.set or args.beam_size or args.checkpoint != "best":
            raise UserError("--set, --beam_size and --checkpoint need --model_dir (an export's "
                            "decoding settings are fixed: python -m pgn_tf.export --set ...)")
        return Summarizer.from_saved_model(args.saved_model)
    summarizer = Summarizer.from_model_dir(args.model_dir, args.checkpoint)
    config_lib.apply_decode_overrides(summarizer.cfg, args.set, "summarize")
    if args.beam_size:
        summarizer.cfg.decode.beam_size = args.beam_size
    return summarizer


class _Progress:
    """A tqdm bar over input lines on standard error: a line counts when it is written or
    skipped (articles as each batch is decoded), with the articles/s decoded beside it."""

    def __init__(self, total: int | None, enabled: bool | None, stream=None):
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="line", file=stream or sys.stderr,
                        disable=None if enabled is None else not enabled, dynamic_ncols=True,
                        desc="summarize", smoothing=0.1, mininterval=0.5)
        self.decoded = 0
        self.t0 = time.perf_counter()

    def to_line(self, lineno: int) -> None:
        """Every line up to lineno is written or skipped."""
        if lineno > self.bar.n:
            self.bar.update(lineno - self.bar.n)

    def articles(self, n: int) -> None:
        """A batch of n articles was decoded."""
        self.decoded += n
        rate = self.decoded / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{rate:.1f} articles/s", refresh=False)
        self.bar.update(n)

    def write(self, message: str) -> None:
        self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def check_paths(input_path: str, output: str) -> None:
    """UserError for an --output that cannot be resumed or that is the input."""
    if output != "-" and output.endswith(".gz"):
        raise UserError("--output must be plain (resuming reads it back): compress it after, "
                        "or write - and pipe it through gzip")
    if input_path != "-" and output != "-" and (
            os.path.abspath(input_path) == os.path.abspath(output)):
        raise UserError("--output must differ from --input")


def summarize_corpus(summarizer, input_path: str, output: str, *, fmt: str | None = None,
                     field: str = "article", output_field: str = "summary",
                     batch_size: int | None = None, on_error: str = "skip",
                     progress: str = "auto", progress_stream=None) -> dict:
    """The batch form (module docstring): the articles of `input_path` ("-": standard input)
    summarized by `summarizer` (a Summarizer) into `output` ("-": standard output), resuming
    after the rows already there. Returns the run's counts (lines, records, skipped_done,
    summarized, bad, blank, seconds, articles_per_sec).

    Args:
      fmt: "text" or "jsonl" (default: by file name, else by the first line);
      field, output_field: the JSONL fields read and written; batch_size: articles per model
      call (at most the summarizer's); on_error: "skip" or "stop" at a bad line;
      progress: "auto", "on" or "off" (a bar on progress_stream, default standard error).
    """
    check_paths(input_path, output)
    done = rows_done(output)
    total = count_lines(input_path) if progress != "off" else None
    enabled = {"on": True, "off": False}.get(progress)
    bar = _Progress(total, enabled, progress_stream)
    out = sys.stdout if output == "-" else open(output, "a", encoding="utf-8")  # noqa: SIM115
    counts = {"lines": 0, "records": 0, "skipped_done": 0, "summarized": 0, "bad": 0,
              "blank": 0}
    t0 = time.perf_counter()
    window: list[dict] = []
    size = min(batch_size or summarizer.batch_size, summarizer.batch_size)

    def flush() -> None:
        if not window:
            return
        results = summarizer.decode([r[field] for r in window], size, on_batch=bar.articles)
        for record, result in zip(window, results):
            if fmt == "text":
                out.write(result["summary"].replace("\n", " ") + "\n")
            else:
                out.write(json.dumps({**record, output_field: result["summary"]},
                                     ensure_ascii=False) + "\n")
        out.flush()
        counts["summarized"] += len(window)
        window.clear()
        bar.to_line(counts["lines"])

    warned = False
    try:
        with _open_input(input_path) as f:
            lines = raw_lines(f)
            for lineno, raw in lines:
                if fmt is None:
                    fmt = detect_format(input_path, raw)
                counts["lines"] = lineno
                try:
                    record = parse_line(raw, fmt, field)
                except BadLine as e:
                    counts["bad"] += 1
                    where = f"{'stdin' if input_path == '-' else input_path} line {lineno}"
                    if on_error == "stop":
                        flush()
                        raise UserError(f"{where}: {e}; stopped (the rows before it are "
                                        f"written; --on_error skip goes past bad lines)") from None
                    bar.write(f"[pgn_tf.summarize] {where}: {e}; skipped")
                    record = None
                else:
                    counts["blank" if record is None else "records"] += 1
                if record is None or counts["records"] <= done:
                    counts["skipped_done"] += record is not None
                    if not window:
                        bar.to_line(lineno)
                    continue
                if fmt == "jsonl" and output_field in record and not warned:
                    warned = True
                    bar.write(f"[pgn_tf.summarize] input records have a '{output_field}' "
                              f"field: the output replaces it (--output_field NAME keeps both)")
                window.append(record)
                if len(window) >= size * WINDOW_BATCHES:
                    flush()
            flush()
    finally:
        bar.close()
        if out is not sys.stdout:
            out.close()
    if done > counts["records"]:
        raise UserError(f"--output {output} has {done} rows but --input has only "
                        f"{counts['records']} records: is it the output of another input?")
    seconds = time.perf_counter() - t0
    counts["seconds"] = round(seconds, 2)
    counts["articles_per_sec"] = round(counts["summarized"] / seconds, 2) if seconds else 0.0
    return counts


def summarize_file(args, progress_stream=None) -> dict:
    """The parsed flags of the batch form -> `summarize_corpus`; prints its counts' line on
    standard error."""
    check_paths(args.input, args.output)
    counts = summarize_corpus(
        load_summarizer(args), args.input, args.output, fmt=args.format, field=args.field,
        output_field=args.output_field, batch_size=args.batch_size, on_error=args.on_error,
        progress=args.progress, progress_stream=progress_stream)
    print(f"[pgn_tf.summarize] {counts['records']} records in {counts['lines']} lines: "
          f"{counts['summarized']} summarized, {counts['skipped_done']} already in the output, "
          f"{counts['bad']} bad line(s) skipped; {counts['articles_per_sec']} articles/s",
          file=sys.stderr)
    return counts


def run(args):
    if args.input is None:
        if args.output or args.saved_model:
            raise UserError("--output and --saved_model go with --input FILE")
        return summarize(args)
    if args.text is not None or args.explain:
        raise UserError("with --input, give no TEXT and no --explain (explain one text at a "
                        "time, or use Summarizer.explain)")
    if not args.output:
        raise UserError("--input needs --output (a file, or - for standard output)")
    return summarize_file(args)


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batch_size is not None and args.batch_size <= 0:
        print("pgn_tf.summarize: error: --batch_size must be positive", file=sys.stderr)
        return 2
    return run_cli("pgn_tf.summarize", run, args)
