"""TFDS `cnn_dailymail` from a local data_dir (already prepared; nothing is downloaded).

The builder is opened from its directory (`<data_dir>/cnn_dailymail/<version>/`) with
tfds.builder_from_directory, which needs only the prepared files, not network access.
Features: `article`, `highlights` (sentences joined by "\\n"), `id`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import tensorflow as tf

from pgn_tf.data.example import Example, ReadStats


def _version_dir(data_dir: str, name: str) -> str:
    root = os.path.join(data_dir, name)
    if not tf.io.gfile.isdir(root):
        raise FileNotFoundError(
            f"no prepared TFDS dataset '{name}' under {data_dir} (expected {root}/<version>/)"
        )
    versions = [v.rstrip("/") for v in tf.io.gfile.listdir(root)]
    versions = [v for v in versions if v[:1].isdigit()]
    if not versions:
        raise FileNotFoundError(f"{root} holds no version directory")
    best = max(versions, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
    return os.path.join(root, best)


def read_tfds(
    data_dir: str, split: str = "train", name: str = "cnn_dailymail", stats: ReadStats | None = None
) -> Iterator[Example]:
    import tensorflow_datasets as tfds  # heavy import, only when this reader is used

    stats = stats if stats is not None else ReadStats()
    builder = tfds.builder_from_directory(_version_dir(data_dir, name))
    ds = builder.as_dataset(split=split, shuffle_files=False)
    for d in ds.as_numpy_iterator():
        stats.read += 1
        article = d["article"].decode("utf-8", "replace")
        summary = d["highlights"].decode("utf-8", "replace")
        yield Example(article, summary, d.get("id", b"").decode("utf-8", "replace"))
