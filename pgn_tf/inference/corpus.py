"""A file of articles summarized into a file of summaries (`python -m pgn_tf.summarize
--input`), resumably, and one text summarized with its explanation (the command's single-text
form). No TensorFlow at import: the command reads its flags before TensorFlow loads.

The input (`-`: standard input; `.gz` read compressed) is read by pgn_tf.data.articles (plain
text: one article a line; JSON Lines: objects with an article field); articles are decoded by
`SummarizerAPI.decode` a window of WINDOW_BATCHES batches at a time (sorted by length there) and
written back in input order, one row per good record. The rows already in the output are kept
and their records skipped (a row cut short by a kill is removed first).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from pgn_tf.data.articles import BadLine, detect_format, parse_line, raw_lines
from pgn_tf.utils.errors import UserError

if TYPE_CHECKING:  # TensorFlow: not at import
    from pgn_tf.decoding.search import DecodeRequest

log = logging.getLogger("pgn_tf")

WINDOW_BATCHES = 16  # batches read ahead, sorted by length, decoded, then written in order


@dataclasses.dataclass
class CorpusCounts:
    """What `summarize_corpus` did: input lines read, records among them, records skipped as
    already in the output, records summarized, bad lines, blank JSONL lines, and its speed."""

    lines: int = 0
    records: int = 0
    skipped_done: int = 0
    summarized: int = 0
    bad: int = 0
    blank: int = 0
    seconds: float = 0.0
    articles_per_sec: float = 0.0

    def line(self) -> str:
        """The one-line report the command prints."""
        return (f"{self.records} records in {self.lines} lines: {self.summarized} summarized, "
                f"{self.skipped_done} already in the output, {self.bad} bad line(s) skipped; "
                f"{self.articles_per_sec} articles/s")


def open_input(path: str):
    """A binary file object for `path` (`-`: standard input; `.gz`: decompressed)."""
    if path == "-":
        return sys.stdin.buffer
    if not os.path.isfile(path):
        raise UserError(f"--input {path} does not exist")
    f = open(path, "rb")  # noqa: SIM115  (closed by the caller)
    return gzip.GzipFile(fileobj=f) if path.endswith(".gz") else f


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
        log.warning("%s: removed a last row cut short", path)
    return n


def count_lines(path: str) -> int | None:
    """Lines of the input, for the progress bar's total (None for standard input)."""
    if path == "-":
        return None
    n = 0
    try:
        with open_input(path) as f:
            for n, _ in raw_lines(f):  # noqa: B007
                pass
    except OSError:
        return None
    return n


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
                     batch_size: int | None = None, request: DecodeRequest | None = None,
                     on_error: str = "skip", progress: str = "auto",
                     progress_stream=None) -> CorpusCounts:
    """The articles of `input_path` ("-": standard input) summarized by `summarizer` (either
    SummarizerAPI) into `output` ("-": standard output), resuming after the rows already there
    (module docstring).

    Args:
      fmt: "text" or "jsonl" (default: by file name, else by the first line);
      field, output_field: the JSONL fields read and written; batch_size: articles per model
      call (at most the summarizer's); request: the decoding asked of each call (its beam
      size, say; default the config's); on_error: "skip" or "stop" at a bad line (UserError);
      progress: "auto", "on" or "off" (a bar on progress_stream, default standard error).
    """
    check_paths(input_path, output)
    done = rows_done(output)
    total = count_lines(input_path) if progress != "off" else None
    enabled = {"on": True, "off": False}.get(progress)
    bar = _Progress(total, enabled, progress_stream)
    out = sys.stdout if output == "-" else open(output, "a", encoding="utf-8")  # noqa: SIM115
    counts = CorpusCounts()
    t0 = time.perf_counter()
    window: list[dict] = []
    size = min(batch_size or summarizer.batch_size, summarizer.batch_size)

    def flush() -> None:
        if not window:
            return
        results = summarizer.decode([r[field] for r in window], size, on_batch=bar.articles,
                                    request=request)
        for record, result in zip(window, results):
            if fmt == "text":
                out.write(result["summary"].replace("\n", " ") + "\n")
            else:
                out.write(json.dumps({**record, output_field: result["summary"]},
                                     ensure_ascii=False) + "\n")
        out.flush()
        counts.summarized += len(window)
        window.clear()
        bar.to_line(counts.lines)

    warned = False
    try:
        with open_input(input_path) as f:
            for lineno, raw in raw_lines(f):
                if fmt is None:
                    fmt = detect_format(input_path, raw, articles=True)
                counts.lines = lineno
                try:
                    record = parse_line(raw, fmt, field)
                except BadLine as e:
                    counts.bad += 1
                    where = f"{'stdin' if input_path == '-' else input_path} line {lineno}"
                    if on_error == "stop":
                        flush()
                        raise UserError(f"{where}: {e}; stopped (the rows before it are "
                                        f"written; --on_error skip goes past bad lines)") from None
                    bar.write(f"[pgn_tf.summarize] {where}: {e}; skipped")
                    record = None
                else:
                    if record is None:
                        counts.blank += 1
                    else:
                        counts.records += 1
                if record is None or counts.records <= done:
                    counts.skipped_done += record is not None
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
    if done > counts.records:
        raise UserError(f"--output {output} has {done} rows but --input has only "
                        f"{counts.records} records: is it the output of another input?")
    seconds = time.perf_counter() - t0
    counts.seconds = round(seconds, 2)
    counts.articles_per_sec = round(counts.summarized / seconds, 2) if seconds else 0.0
    return counts


def summarize_text(summarizer, text: str, *, request: DecodeRequest | None = None,
                   explain: str | None = None) -> str:
    """One text's summary; with `explain` (a .html or .png path), See et al.'s visualisation
    written there too: the attention over the article for each output word, with p_gen."""
    if explain and not explain.endswith((".png", ".html", ".htm")):
        raise UserError(f"--explain {explain}: use a .html or .png file name")
    if not explain:
        return summarizer.decode([text], request=request)[0]["summary"]
    from pgn_tf import visualize

    out = summarizer.explain(text, request)
    attn, p_gen = out["attention"], out["p_gen"]
    if explain.endswith(".png"):
        visualize.write_png(explain, visualize.attention_image(attn, p_gen, scale=16))
    else:
        with open(explain, "w", encoding="utf-8") as f:
            f.write(visualize.attention_html(out["source_tokens"], out["tokens"], attn, p_gen))
    log.info("wrote %s", explain)
    return out["summary"]
