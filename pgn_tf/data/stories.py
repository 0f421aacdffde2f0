"""CNN/DailyMail raw `.story` files: article text, then `@highlight` blocks (one sentence each)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import tensorflow as tf

from pgn_tf.data.example import Example, ReadStats

# See et al.'s make_datafiles.py adds a period to lines that end without one.
_END_TOKENS = (".", "!", "?", "...", "'", "`", '"', "\u2019", "\u201d", ")")


def _fix_missing_period(line: str) -> str:
    if "@highlight" in line or not line or line.endswith(_END_TOKENS):
        return line
    return line + " ."


def parse_story(text: str) -> tuple[str, list[str]]:
    """Returns (article, highlights). Lines before the first @highlight are the article."""
    lines = [_fix_missing_period(ln.strip()) for ln in text.splitlines()]
    article, highlights, next_is_highlight = [], [], False
    for line in lines:
        if not line:
            continue
        if line.startswith("@highlight"):
            next_is_highlight = True
        elif next_is_highlight:
            highlights.append(line)
            next_is_highlight = False
        else:
            article.append(line)
    return " ".join(article), highlights


def read_stories(path: str, stats: ReadStats | None = None) -> Iterator[Example]:
    """Reads every *.story under a directory (or one file); stories without @highlight are dropped
    and counted."""
    stats = stats if stats is not None else ReadStats()
    if tf.io.gfile.isdir(path):
        files = sorted(tf.io.gfile.glob(os.path.join(path, "*.story")))
    else:
        files = sorted(tf.io.gfile.glob(path))
    for fn in files:
        with tf.io.gfile.GFile(fn, "rb") as f:
            ex = story_example(f.read(), fn, stats)
        if ex is not None:
            yield ex


def story_id(path: str) -> str:
    """The story's name without `.story`: See et al.'s sha1 of its URL for CNN/DM."""
    base = os.path.basename(path)
    return base[: -len(".story")] if base.endswith(".story") else path


def story_example(data: bytes, path: str, stats: ReadStats) -> Example | None:
    """One .story file's bytes -> Example; None (counted) when it has no @highlight."""
    stats.read += 1
    article, highlights = parse_story(data.decode("utf-8", errors="replace"))
    if not highlights:
        stats.drop("no @highlight")
        return None
    return Example(article, "\n".join(highlights), story_id(path))
