"""The project's TFRecord schema: tf.train.Example with bytes features article, summary, id.

Text stays raw in the records; tokenization happens in-graph at read time, by the one tokenizer
the export runs too (pgn_tf.text), so training and serving cannot tokenize apart.

Reading is checked lazily: TF's reader CRC-checks each record as it reads it, and
`checked_records` turns the first bad one into an error naming the file and the record's byte
offset (a bare DataLossError names neither file nor record). At start-up `check_tfrecords`
reads no record data: it walks the record headers (a truncated or cut file fails there, before
anything is written) and parses each file's first record (a foreign file fails there).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterable

import google_crc32c
import tensorflow as tf

from pgn_tf.data.example import Example
from pgn_tf.utils import durable

# A record on disk: uint64 length, uint32 CRC of the length, the data, uint32 CRC of the data.
RECORD_OVERHEAD = 16
_CHECK_BLOCK = 256  # records per offset-summing step of checked_records
_CHECK_FAILED = re.compile(
    r"assertion failed: \[(data file .*? at byte offset \d+ of a \d+-byte file)\]")

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
        durable.fsync_file(n + ".tmp")  # the data before the name that publishes it
        tf.io.gfile.rename(n + ".tmp", n, overwrite=True)
    durable.fsync_dir(os.path.dirname(prefix) or ".")
    return names


@tf.autograph.experimental.do_not_convert
def parse(serialized: tf.Tensor) -> dict:
    return tf.io.parse_single_example(serialized, FEATURES)


def file_sizes(files: list[str]) -> list[int]:
    return [tf.io.gfile.stat(fn).length for fn in files]


@tf.autograph.experimental.do_not_convert  # and the functions it hands tf.data (inside it)
def checked_records(filename: tf.Tensor, size: tf.Tensor) -> tf.data.Dataset:
    """The records of one file (string scalars), each CRC-checked by TF's reader as it is read;
    a corrupt or truncated record, or a file that ends early, raises InvalidArgumentError
    "data file F has a corrupt or truncated record at byte offset N of a S-byte file".

    Args: filename: string scalar; size: int64 scalar, the file's length in bytes.
    The reader's error is dropped (ignore_errors ends the file there), then the byte offset
    reached after the last good record is compared with the file's size. The offsets are
    summed over blocks of records ([<= 256] strings), not one record at a time: a per-record
    step would cost several times the read itself.
    """
    size = tf.cast(size, tf.int64)
    blocks = tf.data.TFRecordDataset(filename).ignore_errors().batch(_CHECK_BLOCK)
    marked = blocks.map(lambda b: (b, False)).concatenate(
        tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True)))  # end-of-file sentinel

    def step(offset, element):
        block, is_end = element  # offset: int64 [], where the block's first record starts

        def check():
            msg = tf.strings.join([
                "data file ", filename, " has a corrupt or truncated record at byte offset ",
                tf.strings.as_string(offset), " of a ", tf.strings.as_string(size), "-byte file"])
            with tf.control_dependencies([tf.debugging.Assert(tf.equal(offset, size), [msg])]):
                return tf.identity(offset)

        offset = tf.cond(is_end, check, lambda: offset)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(block), tf.int64))
        return offset + nbytes + RECORD_OVERHEAD * tf.size(block, out_type=tf.int64), element

    return (marked.scan(tf.constant(0, tf.int64), step)
            .filter(lambda block, is_end: tf.logical_not(is_end))
            .map(lambda block, is_end: block)
            .unbatch())


def read_records(files: list[str]) -> tf.data.Dataset:
    """Every record of the files in order, lazily checked (checked_records)."""
    sizes = tf.constant(file_sizes(files), tf.int64)
    return tf.data.Dataset.from_tensor_slices((files, sizes)).flat_map(checked_records)


def read_error(error: Exception) -> str | None:
    """The one-line message of a failed record check inside a TF error raised while iterating
    a dataset built on checked_records (None for any other error). Entry points turn it into
    a UserError: `except tf.errors.OpError as e: msg = read_error(e) ...`."""
    match = _CHECK_FAILED.search(getattr(error, "message", None) or str(error))
    return match.group(1) if match else None


def read_tfrecords(pattern: str) -> Iterable[Example]:
    """Examples of the matching files in order; a corrupt record raises ValueError naming the
    file and byte offset."""
    for fn in sorted(tf.io.gfile.glob(pattern)):
        try:
            for rec in read_records([fn]):
                d = parse(rec)
                yield Example(*(d[k].numpy().decode("utf-8", "replace")
                                for k in ("article", "summary", "id")))
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise ValueError(read_error(e) or f"data file {fn} is not a TFRecord of pgn_tf "
                                              f"examples: {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    msg = getattr(e, "message", str(e)).strip() or type(e).__name__
    return re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:.*$|\s*name:\s*$", "", msg.splitlines()[0])


def _masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def framing_error(path: str) -> str | None:
    """Walks a local file's record headers, the data skipped: None when the records tile the
    file exactly, else what is wrong and at which byte offset. Reads 12 bytes a record through
    mmap (only the pages holding headers), so it costs little next to reading the records
    (benchmarks/read_check.py times it)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            header = struct.Struct("<QI")  # data length, masked CRC of those 8 bytes
            offset = 0
            while offset < size:
                if offset + header.size > size:
                    return f"truncated record at byte offset {offset} of a {size}-byte file"
                length, crc = header.unpack_from(mm, offset)
                if _masked_crc(mm[offset : offset + 8]) != crc:
                    return f"corrupt record length at byte offset {offset} of a {size}-byte file"
                if offset + length + RECORD_OVERHEAD > size:
                    return f"truncated record at byte offset {offset} of a {size}-byte file"
                offset += length + RECORD_OVERHEAD
    return None


def check_tfrecords(files: list[str]) -> int:
    """The start-up check, without reading the records' data: each file exists, on a local
    disk its record headers tile it exactly (a truncated file fails here), and its first record
    is a pgn_tf Example. Every record's data is CRC-checked later, as it is read
    (checked_records). Returns how many files hold a record.

    Raises ValueError naming the file (and byte offset) for a missing, cut or foreign file."""
    nonempty = 0
    for fn in files:
        if not os.path.basename(fn) or not tf.io.gfile.exists(fn):
            raise ValueError(f"data file {fn} does not exist")
        bad = framing_error(fn) if "://" not in fn else None
        if bad:
            raise ValueError(f"data file {fn} is not a readable TFRecord of pgn_tf examples: {bad}")
        try:
            for rec in tf.data.TFRecordDataset(fn).take(1):
                parse(rec)
                nonempty += 1
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise ValueError(f"data file {fn} is not a readable TFRecord of pgn_tf examples: "
                             f"{_first_line(e)}") from None
    return nonempty


@tf.autograph.experimental.do_not_convert
def count(n, _):
    """A reduce function: the number of elements (n + 1 for each)."""
    return n + 1


def validate_tfrecords(files: list[str]) -> int:
    """Reads every record (CRC-checked by TF) and parses one; returns the record count.

    A full read: for a check at start-up, check_tfrecords reads one record a file. Raises
    ValueError naming the file (and the byte offset of a bad record)."""
    check_tfrecords(files)
    total = 0
    for fn in files:
        try:
            total += int(read_records([fn]).reduce(tf.constant(0, tf.int64), count))
        except tf.errors.InvalidArgumentError as e:
            raise ValueError(read_error(e) or _first_line(e)) from None
    return total
