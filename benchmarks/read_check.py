"""What the lazy TFRecord check costs: records/s read with and without it, batches/s of the whole
training input (pgn_tf.data.dataset.make_dataset) with and without it, the start-up check
(record headers), and the start-up probe that turns "every summary is empty" into an error
instead of a hang.

    python -m benchmarks.read_check [--examples 20000] [--shards 2] [--repeats 5]

Both variants run in one process, in alternating order, `--repeats` times; the medians are
reported, with the CPU time each costs (process time: on a shared machine the wall-clock rates
swing with other work, the CPU time much less). "plain" is tf.data.TFRecordDataset per file, as before the check.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import tensorflow as tf

from benchmarks.common import emit
from pgn_tf import config as config_lib
from pgn_tf.data import dataset, synthetic, tfrecord
from pgn_tf.data.example import Example


def plain_records(filename, size):
    return tf.data.TFRecordDataset(filename)


def read_rate(files: list[str], reader) -> tuple[float, float]:
    """(records/s, CPU microseconds per record) of reading every record."""
    ds = tf.data.Dataset.from_tensor_slices((files, tfrecord.file_sizes(files)))
    ds = ds.interleave(reader, cycle_length=len(files), num_parallel_calls=tf.data.AUTOTUNE)
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for block in ds.batch(1024):
        n += int(block.shape[0])
    return n / (time.perf_counter() - t0), 1e6 * (time.process_time() - c0) / n


def batch_rate(files, vocab, cfg, reader, batches: int) -> tuple[float, float]:
    """(batches/s, CPU milliseconds per batch) of the training input."""
    real = tfrecord.checked_records
    dataset.tfrecord.checked_records = reader  # make_dataset reads through this name
    try:
        ds = dataset.make_dataset(files, vocab, cfg, 32, True, training=True, seed=0)
    finally:
        dataset.tfrecord.checked_records = real
    it = iter(ds)
    next(it)  # tracing and the first fill of the buffers
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - t0), 1e3 * (time.process_time() - c0) / batches


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=20_000)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, default=200)
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="read_check-")
    files = tfrecord.write_tfrecords(synthetic.generate(a.examples, seed=0),
                                     os.path.join(work, "train"), a.shards)
    cfg = config_lib.preset("tiny").data
    vocab = dataset.build_vocab(files, cfg)
    keys = ("records_per_s", "cpu_us_per_record", "batches_per_s", "cpu_ms_per_batch")
    runs = {f"{name}_{k}": [] for name in ("plain", "checked") for k in keys}
    readers = [("plain", plain_records), ("checked", tfrecord.checked_records)]
    for i in range(a.repeats):
        for name, reader in readers[:: 1 if i % 2 == 0 else -1]:  # alternate which goes first
            values = read_rate(files, reader) + batch_rate(files, vocab, cfg, reader, a.batches)
            for k, v in zip(keys, values):
                runs[f"{name}_{k}"].append(v)
    result = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    # CPU time is what the check costs; wall-clock rates swing with a shared machine's load.
    result["cpu_per_record_ratio"] = round(
        result["checked_cpu_us_per_record"] / result["plain_cpu_us_per_record"], 2)
    result["cpu_per_batch_ratio"] = round(
        result["checked_cpu_ms_per_batch"] / result["plain_cpu_ms_per_batch"], 3)

    t0 = time.perf_counter()
    tfrecord.check_tfrecords(files)  # the start-up check: record headers, first records
    result["startup_check_us_per_record"] = round(1e6 * (time.perf_counter() - t0) / a.examples, 2)
    t0 = time.perf_counter()
    dataset.require_usable_example(files, cfg)
    result["probe_usable_s"] = round(time.perf_counter() - t0, 3)
    empty = tfrecord.write_tfrecords((Example(e.article, "") for e in synthetic.generate(
        a.examples, seed=1)), os.path.join(work, "empty"), a.shards)
    t0 = time.perf_counter()
    try:
        dataset.require_usable_example(empty, cfg)
    except ValueError:
        pass
    result["probe_all_empty_s"] = round(time.perf_counter() - t0, 3)
    result.update(examples=a.examples, shards=a.shards, repeats=a.repeats, batch_size=32)
    shutil.rmtree(work, ignore_errors=True)
    emit("read_check", result)


if __name__ == "__main__":
    main()
