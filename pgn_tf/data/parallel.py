"""Parallel text: one article per line in a source file, its title on the same line of a target
file, the layout of Rush et al.'s released Gigaword/DUC data (`train.article.txt` /
`train.title.txt`) and most headline-generation corpora.

A data path is `SOURCE` (the target is found by replacing "article" with "title", or "src" /
"source" with "tgt" / "target", in the file name) or `SOURCE,TARGET`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import tensorflow as tf

from pgn_tf.data.example import Example, ReadStats
from pgn_tf.data.jsonl import lines, open_lines

_PAIRS = (("article", "title"), ("source", "target"), ("src", "tgt"))


def split_spec(spec: str) -> tuple[str, str]:
    """'a.txt,b.txt' or 'train.article.txt' -> (source path, target path)."""
    if "," in spec:
        source, target = spec.split(",", 1)
        return source, target
    head, name = os.path.split(spec)
    for src_word, tgt_word in _PAIRS:
        if src_word in name:
            i = name.rindex(src_word)
            return spec, os.path.join(head, name[:i] + tgt_word + name[i + len(src_word):])
    raise ValueError(f"cannot tell the target file of {spec}: name it SOURCE,TARGET or put "
                     f"'article' (title), 'source' (target) or 'src' (tgt) in the file name")


def is_parallel(spec: str) -> bool:
    base = os.path.basename(spec.split(",")[0]).lower()
    return "," in spec or (base.endswith((".txt", ".txt.gz")) and
                           any(w in base for w, _ in _PAIRS))


def read_parallel(spec: str, stats: ReadStats | None = None) -> Iterator[Example]:
    """Yields Examples; lines past the shorter file are counted as dropped, and so is the
    damaged end of a truncated or corrupt gzip (jsonl.lines: the reason names file and line)."""
    stats = stats if stats is not None else ReadStats()
    source, target = split_spec(spec)
    for path in (source, target):
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"parallel data file {path} does not exist")
    with open_lines(source) as src_f, open_lines(target) as tgt_f:
        src = (raw for _, raw in lines(src_f, source, stats))
        tgt = (raw for _, raw in lines(tgt_f, target, stats))
        for i, (a, t) in enumerate(itertools.zip_longest(src, tgt)):
            stats.read += 1
            if a is None or t is None:
                stats.drop("no matching line in the other file")
                continue
            yield Example(a.decode("utf-8", "replace").strip(),
                          t.decode("utf-8", "replace").strip(), f"{source}:{i + 1}")
