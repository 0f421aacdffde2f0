"""JSON Lines corpora (optionally gzipped): one {"article": ..., "summary": ..., "id": ...} a line.
A line is parsed by pgn_tf.data.articles.parse_example.

Nothing in a line stops the reading: malformed JSON, nesting too deep for the parser, integers
too long to convert, a value that is not an object, a missing field: each is counted as dropped
(ReadStats) and skipped. A gzip that is truncated or fails its check keeps every line before the
damage and is counted as one dropped record whose reason names the file and line: the lines
before the cut decompressed intact, and the other readers keep the records before a bad one
too (see_bin), so an interrupted download is usable and visible in the counts, not fatal.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator

import tensorflow as tf

from pgn_tf.data.articles import numbered_lines, parse_example
from pgn_tf.data.example import Example, ReadStats


def open_lines(path: str):
    """A binary file object, decompressed when the name ends in .gz."""
    f = tf.io.gfile.GFile(path, "rb")
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=f)
    return f


def lines(f: Iterable[bytes], name: str, stats: ReadStats) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of an open file. A damaged gzip ends it: what follows the last
    whole line is counted in stats as one dropped record, the reason naming file and line."""
    for lineno, raw in numbered_lines(f):
        if isinstance(raw, Exception):
            stats.read += 1
            what = "truncated" if isinstance(raw, EOFError) else "corrupt"
            stats.drop(f"{what} gzip: {name} unreadable after line {lineno - 1}")
            return
        yield lineno, raw


def read_jsonl(path: str, stats: ReadStats | None = None) -> Iterator[Example]:
    """Yields Examples; malformed lines are counted in `stats` and skipped, never fatal."""
    stats = stats if stats is not None else ReadStats()
    with open_lines(path) as f:
        for lineno, raw in lines(f, path, stats):
            ex = parse_example(raw, f"{path}:{lineno}", stats)
            if ex is not None:
                yield ex


def write_jsonl(examples, path: str) -> int:
    n = 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps({"id": ex.id, "article": ex.article, "summary": ex.summary}) + "\n")
            n += 1
    return n
