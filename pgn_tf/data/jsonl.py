"""JSON Lines corpora (optionally gzipped): one {"article": ..., "summary": ..., "id": ...} a line."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import tensorflow as tf

from pgn_tf.data.example import Example, ReadStats


def _open(path: str):
    f = tf.io.gfile.GFile(path, "rb")
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=f)
    return f


def parse_line(raw: bytes, default_id: str, stats: ReadStats) -> Example | None:
    """One JSONL line -> Example; a malformed line is counted in `stats` and gives None.

    Blank lines are not records (None, nothing counted)."""
    if not raw.strip():
        return None
    stats.read += 1
    try:
        d = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        stats.drop("malformed json")
        return None
    if not isinstance(d, dict):
        stats.drop("not a json object")
        return None
    article, summary = d.get("article"), d.get("summary")
    if not isinstance(article, str) or not isinstance(summary, str):
        stats.drop("missing article or summary")
        return None
    return Example(article, summary, str(d.get("id", default_id)))


def read_jsonl(path: str, stats: ReadStats | None = None) -> Iterator[Example]:
    """Yields Examples; malformed lines are counted in `stats` and skipped, never fatal."""
    stats = stats if stats is not None else ReadStats()
    with _open(path) as f:
        for lineno, raw in enumerate(f, 1):
            ex = parse_line(raw, f"{path}:{lineno}", stats)
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
