"""The one article reader's rules: which formats a data path can hold and how one is told from
another (`detect_format`), how a file is cut into lines (`numbered_lines`, `raw_lines`) and how
a line becomes a record (`parse_line`, `parse_example`). The data pipeline (pgn_tf.data.dataset,
jsonl), summarize and the Beam pipelines (pgn_tf.pipelines.readers, summarize) all read through
these.

Two kinds of file hold articles. A corpus (EXAMPLE_FORMATS) holds examples, an article with its
reference summary, for training and evaluation; the Beam preprocessing reads the same formats but
tfrecord, which it writes (PIPELINE_FORMATS). A file to summarize (ARTICLE_FORMATS) holds articles
alone: plain text, one article a line, or JSON Lines with an `article` field.

A JSON line's bad-line rules are one function (`json_record`); the two forms differ only in what
they do with a bad line. A corpus reader counts it in its ReadStats under a short reason and goes
on (`parse_example`: bytes that are not UTF-8 are replaced, so only the JSON can be bad); a file to
summarize reports it to the user with its reason (`parse_line` raises BadLine: bytes that are not
UTF-8 are a bad line, and so is an empty line of plain text).

No TensorFlow at import: pgn_tf.summarize reads its input through here before TF loads
(detect_format imports it for a corpus path only).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator

from pgn_tf.data.example import Example, ReadStats

# Every format a data path can hold; the views below say which reader takes which.
FORMATS = ("tfrecord", "jsonl", "story", "see_bin", "tfds", "parallel", "text")
EXAMPLE_FORMATS = tuple(f for f in FORMATS if f != "text")  # corpora: training, evaluation
PIPELINE_FORMATS = tuple(f for f in EXAMPLE_FORMATS if f != "tfrecord")  # Beam preprocessing
ARTICLE_FORMATS = ("text", "jsonl")  # files to summarize: articles alone
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")

# What a damaged gzip raises while it is read: EOFError for a truncated stream, zlib.error for
# undecodable data, BadGzipFile for a bad header, CRC or length.
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def detect_format(path: str, first_line: bytes | None = None, *, articles: bool = False) -> str:
    """The format of a data path.

    A corpus (articles=False; one of EXAMPLE_FORMATS): `tfds:DIR[:split]`, a parallel spec
    (pgn_tf.data.parallel), a directory (of .story files), a name in JSONL_SUFFIXES, a `.bin`
    (See et al.'s), else tfrecord.
    A file to summarize (articles=True; one of ARTICLE_FORMATS): jsonl by the name (never for
    "-", standard input), else by `first_line` (a JSON object is JSONL), else text."""
    if articles:
        if path != "-" and path.lower().endswith(JSONL_SUFFIXES):
            return "jsonl"
        return ("jsonl" if first_line is not None and first_line.lstrip().startswith(b"{")
                else "text")
    import tensorflow as tf

    from pgn_tf.data import parallel

    if path.startswith("tfds:"):
        return "tfds"
    if parallel.is_parallel(path):
        return "parallel"
    if tf.io.gfile.isdir(path):
        return "story"
    base = path.lower()
    if base.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if base.endswith(".bin"):
        return "see_bin"
    return "tfrecord"


# -- lines ------------------------------------------------------------------------------------


def numbered_lines(f: Iterable[bytes]) -> Iterator[tuple[int, bytes | Exception]]:
    """(line number, raw line) of an open binary file; a damaged gzip ends it with (the next
    line number, the gzip error: EOFError for a truncated file)."""
    lineno = 0
    it = iter(f)
    while True:
        try:
            raw = next(it)
        except StopIteration:
            return
        except GZIP_ERRORS as e:
            yield lineno + 1, e
            return
        lineno += 1
        yield lineno, raw


def raw_lines(f: Iterable[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the line end) of a binary file; a damaged gzip ends it
    with (next line number, None)."""
    for lineno, raw in numbered_lines(f):
        yield lineno, None if isinstance(raw, Exception) else raw.rstrip(b"\r\n")


# -- records ----------------------------------------------------------------------------------


class BadLine(Exception):
    """A line that holds no record. str(): why, for a person; `reason`: the short key a corpus
    reader counts it under (ReadStats.drop)."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def json_record(line: str, fields: tuple[str, ...]) -> dict:
    """One JSON line (decoded, not blank) -> its object, which holds a string at each of
    `fields`; BadLine otherwise."""
    try:
        record = json.loads(line)
    except RecursionError:
        raise BadLine("not JSON (nested too deeply)", "json nested too deep") from None
    except json.JSONDecodeError as e:
        raise BadLine(f"not JSON ({str(e)[:80]})", "malformed json") from None
    except ValueError as e:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise BadLine(f"not JSON ({str(e)[:80]})", "json number too long") from None
    if not isinstance(record, dict):
        raise BadLine(f"not a JSON object (a {type(record).__name__})", "not a json object")
    for field in fields:
        if not isinstance(record.get(field), str):
            what = "no" if field not in record else f"a {type(record[field]).__name__} as its"
            raise BadLine(f"{what} '{field}' field" + ("" if field not in record else ", not text"),
                          f"missing {' or '.join(fields)}")
    return record


def parse_line(raw: bytes | None, fmt: str, field: str = "article") -> dict | None:
    """One line of a file to summarize (fmt "text" or "jsonl") -> a record holding the article
    at `field`; None for a blank JSONL line (not a record, as in a corpus); BadLine for a line
    that holds no article (raw None: a damaged gzip, nothing after it can be read)."""
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
    return json_record(line, (field,))


def parse_example(raw: bytes, default_id: str, stats: ReadStats) -> Example | None:
    """One JSONL line of a corpus -> Example; a bad line is counted in `stats` (under its
    BadLine reason) and gives None. Blank lines are not records (None, nothing counted)."""
    if not raw.strip():
        return None
    stats.read += 1
    try:
        d = json_record(raw.decode("utf-8", errors="replace"), ("article", "summary"))
    except BadLine as e:
        stats.drop(e.reason)
        return None
    return Example(d["article"], d["summary"], str(d.get("id", default_id)))
