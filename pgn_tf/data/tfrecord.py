"""The project's TFRecord schema: tf.train.Example with bytes features article, summary, id.

Text stays raw in the records (DESIGN.md); tokenization happens in-graph at read time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import tensorflow as tf

from pgn_tf.data.example import Example

FEATURES = {
    "article": tf.io.FixedLenFeature([], tf.string, default_value=""),
    "summary": tf.io.FixedLenFeature([], tf.string, default_value=""),
    "id": tf.io.FixedLenFeature([], tf.string, default_value=""),
}


def to_tf_example(ex: Example) -> tf.train.Example:
    def b(s: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[s.encode("utf-8")]))

    return tf.train.Example(
        features=tf.train.Features(
            feature={"article": b(ex.article), "summary": b(ex.summary), "id": b(ex.id)}
        )
    )


def shard_name(prefix: str, index: int, num_shards: int) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}.tfrecord"


def write_tfrecords(examples: Iterable[Example], prefix: str, num_shards: int = 1) -> list[str]:
    """Round-robins examples into num_shards files; each is written to a temp name and renamed
    when complete, so a reader never sees half a shard. Returns the file names."""
    names = [shard_name(prefix, i, num_shards) for i in range(num_shards)]
    writers = [tf.io.TFRecordWriter(n + ".tmp") for n in names]
    try:
        for i, ex in enumerate(examples):
            writers[i % num_shards].write(to_tf_example(ex).SerializeToString())
    finally:
        for w in writers:
            w.close()
    for n in names:
        tf.io.gfile.rename(n + ".tmp", n, overwrite=True)
    return names


def parse(serialized: tf.Tensor) -> dict:
    return tf.io.parse_single_example(serialized, FEATURES)


def read_tfrecords(pattern: str) -> Iterable[Example]:
    for fn in sorted(tf.io.gfile.glob(pattern)):
        for rec in tf.data.TFRecordDataset(fn):
            d = parse(rec)
            yield Example(*(d[k].numpy().decode("utf-8", "replace") for k in ("article", "summary", "id")))


def validate_tfrecords(files: list[str]) -> int:
    """Reads every record (CRC-checked by TF) and parses one; returns the record count.

    Raises ValueError naming the file for a corrupt, truncated or foreign file, so a training
    run fails at start-up with the culprit named instead of mid-epoch with a bare DataLossError.
    """
    total = 0
    for fn in files:
        if not os.path.basename(fn) or not tf.io.gfile.exists(fn):
            raise ValueError(f"data file {fn} does not exist")
        ds = tf.data.TFRecordDataset(fn)
        try:
            n = int(ds.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1))
            for rec in ds.take(1):
                parse(rec)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            msg = getattr(e, "message", str(e)).strip() or type(e).__name__
            msg = re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:.*$|\s*name:\s*$", "", msg.splitlines()[0])
            raise ValueError(f"data file {fn} is not a readable TFRecord of pgn_tf examples: {msg}") from None
        total += n
    return total
