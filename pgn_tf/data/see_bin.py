"""See et al.'s chunked `.bin` files: repeated [8-byte length][serialized tf.Example] records.

The Example has bytes features `article` and `abstract`; abstract sentences are wrapped in
`<s> ... </s>` tags.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

import tensorflow as tf

from pgn_tf.data.example import Example, ReadStats

_SENT = re.compile(r"<s>(.*?)</s>", re.S)


def abstract_to_sentences(abstract: str) -> list[str]:
    return [s.strip() for s in _SENT.findall(abstract) if s.strip()]


def read_see_bin(path: str, stats: ReadStats | None = None) -> Iterator[Example]:
    """Reads one or more .bin files (a glob); a truncated or undecodable record is counted and
    ends that file, since the framing after it cannot be trusted."""
    stats = stats if stats is not None else ReadStats()
    for fn in sorted(tf.io.gfile.glob(path)):
        with tf.io.gfile.GFile(fn, "rb") as f:
            yield from read_see_bin_file(f, fn, stats)


def read_see_bin_file(f, name: str, stats: ReadStats) -> Iterator[Example]:
    """The records of one open binary file; ids are `name:index`."""
    index = 0
    while True:
        len_bytes = f.read(8)
        if not len_bytes:
            return
        stats.read += 1
        if len(len_bytes) < 8:
            stats.drop("truncated record")
            return
        (n,) = struct.unpack("q", len_bytes)
        payload = f.read(n) if 0 <= n < (1 << 31) else b""
        if n < 0 or len(payload) != n:
            stats.drop("truncated record")
            return
        try:
            ex = tf.train.Example.FromString(payload)
        except Exception:  # protobuf raises DecodeError; any failure means a bad record
            stats.drop("undecodable record")
            return
        feats = ex.features.feature
        if "article" not in feats or "abstract" not in feats:
            stats.drop("missing article or abstract")
            continue
        article = feats["article"].bytes_list.value[0].decode("utf-8", "replace")
        abstract = feats["abstract"].bytes_list.value[0].decode("utf-8", "replace")
        sents = abstract_to_sentences(abstract)
        yield Example(article, "\n".join(sents), f"{name}:{index}")
        index += 1


def write_see_bin(examples, path: str) -> None:
    """Writes the format (used by tests to build byte-exact fixtures)."""
    with open(path, "wb") as f:
        for ex in examples:
            abstract = " ".join(f"<s> {s} </s>" for s in ex.summary.split("\n"))
            tf_ex = tf.train.Example()
            tf_ex.features.feature["article"].bytes_list.value.append(ex.article.encode())
            tf_ex.features.feature["abstract"].bytes_list.value.append(abstract.encode())
            payload = tf_ex.SerializeToString()
            f.write(struct.pack("q", len(payload)))
            f.write(struct.pack(f"{len(payload)}s", payload))
