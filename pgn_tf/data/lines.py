"""Numbered lines of a (maybe gzipped) binary file, where a damaged gzip ends the file rather
than the program. No TensorFlow: `pgn_tf.summarize` reads its input with it before TF loads."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Iterator

# What a damaged gzip raises while it is read: EOFError for a truncated stream, zlib.error for
# undecodable data, BadGzipFile for a bad header, CRC or length.
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


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
