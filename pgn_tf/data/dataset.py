"""The tf.data input function: records -> tokens -> padded, bucketed batches of model features.

Batch features (B = batch, L = article tokens, T = decoder steps, M = article OOVs):
    enc_ids      int32  [B, L]  vocab ids, [UNK] for OOVs, [PAD] after the article
    enc_ext_ids  int32  [B, L]  extended-vocab ids (OOV k of the article -> V + k)
    enc_len      int32  [B]
    dec_input    int32  [B, T]  [START] w_1 ... (vocab ids only)
    target       int32  [B, T]  w_1 ... [STOP]  (extended ids for pointer models, else [UNK])
    dec_len      int32  [B]
    oovs         string [B, M]  the article's OOV words, first-occurrence order
    num_oovs     int32  [B]
    article, summary, id  string [B]  raw text, for evaluation and TensorBoard samples

Every function handed to tf.data here and in tfrecord is marked
`tf.autograph.experimental.do_not_convert`: tf.data would otherwise rewrite it (and all it
calls) with autograph before tracing (docs/design.md, "Tracing without autograph";
tests/data/test_dataset_no_autograph.py).
"""

from __future__ import annotations

import hashlib
import logging
import os

import tensorflow as tf

from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.config import DataConfig
from pgn_tf.data import tfrecord
from pgn_tf.data.articles import EXAMPLE_FORMATS, detect_format
from pgn_tf.data.example import Example, ReadStats
from pgn_tf.utils import progress
from pgn_tf.utils.errors import UserError

log = logging.getLogger("pgn_tf")  # a command shows it as [pgn_tf] lines (pgn_tf.utils.logs)

# The numeric features a model and its objective read (the strings stay out of the train step).
MODEL_FEATURES = ("enc_ids", "enc_ext_ids", "enc_len", "num_oovs", "dec_input", "target",
                  "dec_len")


@tf.autograph.experimental.do_not_convert
def model_features(batch: dict) -> dict:
    """A batch (module docstring) -> the MODEL_FEATURES only."""
    return {k: batch[k] for k in MODEL_FEATURES}


def read_examples(path: str, fmt: str, stats: ReadStats):
    """Iterates Examples of any supported format (the readers count what they drop)."""
    from pgn_tf.data import jsonl, parallel, see_bin, stories, tfds_reader

    if fmt == "parallel":
        return parallel.read_parallel(path, stats)
    if fmt == "jsonl":
        return jsonl.read_jsonl(path, stats)
    if fmt == "story":
        return stories.read_stories(path, stats)
    if fmt == "see_bin":
        return see_bin.read_see_bin(path, stats)
    if fmt == "tfds":
        spec = path[len("tfds:") :]
        data_dir, _, split = spec.partition(":")
        return tfds_reader.read_tfds(data_dir, split or "train", stats=stats)
    raise ValueError(f"unknown data format '{fmt}' (one of {', '.join(EXAMPLE_FORMATS)})")


def resolve_files(path: str, cache_dir: str, fmt: str | None = None,
                  convert: bool = True, verbose: int | None = None) -> list[str]:
    """TFRecord files for a data path of any format.

    TFRecords (a file or glob) are used in place, their first records checked (the rest are
    checked as they are read, tfrecord.checked_records); other formats are converted
    once into `cache_dir` (keyed by the source's name, size and mtime) and reused after, with
    a progress bar of the records converted (verbose None: when stdout is a terminal).
    convert=False (a multi-worker run's non-chief workers: the chief converts) only finds the
    cache. Raises ValueError naming the path when it is missing, empty or unreadable.
    """
    if not path:
        raise ValueError("no data path given")
    fmt = fmt or detect_format(path)
    if fmt == "tfrecord":
        files = sorted(tf.io.gfile.glob(path))
        if not files:
            raise ValueError(f"data path {path} matches no file")
        if tfrecord.check_tfrecords(files) == 0:  # later records: checked as they are read
            raise ValueError(f"data path {path} holds no records")
        return files
    src = path[len("tfds:") :].split(":")[0] if fmt == "tfds" else path.split(",")[0]
    if not tf.io.gfile.exists(src):
        raise ValueError(f"data path {src} does not exist")
    stat = os.stat(src) if os.path.exists(src) else None
    key = f"{os.path.abspath(path)}|{stat.st_size if stat else 0}|{stat.st_mtime if stat else 0}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    prefix = os.path.join(cache_dir, f"{os.path.basename(src.rstrip('/')) or 'data'}-{digest}")
    done = prefix + ".done"
    if tf.io.gfile.exists(done):
        return sorted(tf.io.gfile.glob(prefix + "-*.tfrecord"))
    if not convert:
        raise ValueError(f"data path {path}: its TFRecord cache {done} is missing; every worker "
                         f"must see the same data path and model dir (a shared file system)")
    tf.io.gfile.makedirs(cache_dir)
    stats = ReadStats()
    bar = progress.progbar(None, "record", verbose)
    files = tfrecord.write_tfrecords(progress.counted(read_examples(path, fmt, stats), bar),
                                     prefix, 1)
    if stats.kept == 0:
        for fn in files:
            tf.io.gfile.remove(fn)
        raise ValueError(f"data path {path} holds no usable examples ({stats.summary()})")
    with tf.io.gfile.GFile(done, "w") as f:
        f.write(stats.summary() + "\n")
    if stats.dropped:
        log.info("%s: %s", path, stats.summary())
    return files


def shard_by_data(ds: tf.data.Dataset) -> tf.data.Dataset:
    """Multi-worker input: every worker reads the same stream and keeps its part of each
    global batch (tf.data AutoShardPolicy.DATA). File-based sharding would need at least as
    many files as workers (a converted corpus is one file) and would make the batches depend on
    the number of workers; by data, a seed gives the same global batches on any cluster."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def tokenize_fn(cfg: DataConfig):
    """Per-example map: raw strings -> article tokens [<= L] and summary tokens [<= T]."""

    @tf.autograph.experimental.do_not_convert
    def fn(record: dict) -> dict:
        article = text.tokenize(
            record["article"], cfg.lowercase, cfg.replace_digits, max_chars=cfg.max_enc_steps * 20
        )[: cfg.max_enc_steps]
        summary = text.tokenize(
            tf.strings.regex_replace(record["summary"], "\n", " "),
            cfg.lowercase,
            cfg.replace_digits,
            max_chars=cfg.max_dec_steps * 20,
        )[: cfg.max_dec_steps]
        return dict(record, enc_tokens=article, dec_tokens=summary)

    return fn


def encode_articles(enc_tokens: tf.Tensor, vocab: vocab_lib.Vocab) -> dict:
    """Article features from padded tokens: string [B, L] ("" pad) -> enc_* / oovs features.

    Shared by tf.data and the exported serving graph.
    """
    # At least one column, so a batch of empty articles still has shape [B, 1].
    enc_tokens = tf.pad(enc_tokens, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(enc_tokens)[1])]])
    mask = tf.not_equal(enc_tokens, "")
    ids = tf.cast(vocab.lookup_table.lookup(enc_tokens), tf.int32)
    ids = tf.where(mask, ids, vocab_lib.PAD_ID)
    ext, oovs, num_oovs = vocab_lib.extend_vocab(enc_tokens, ids, mask, vocab.size)
    return {
        "enc_ids": ids,
        "enc_ext_ids": ext,
        "enc_len": tf.reduce_sum(tf.cast(mask, tf.int32), axis=1),
        "oovs": oovs,
        "num_oovs": num_oovs,
    }


def encode_batch(batch: dict, vocab: vocab_lib.Vocab, max_dec_steps: int, pointer_gen: bool) -> dict:
    """Batched map: padded tokens -> model features (module docstring), See et al.'s target
    convention: input [START] w_1..w_n, target w_1..w_n [STOP], both cut to max_dec_steps."""
    feats = encode_articles(batch["enc_tokens"], vocab)
    dec_tokens = batch["dec_tokens"]  # [B, T'] with T' <= max_dec_steps
    dec_mask = tf.not_equal(dec_tokens, "")
    n = tf.reduce_sum(tf.cast(dec_mask, tf.int32), axis=1)  # [B]
    dec_ids = tf.where(dec_mask, tf.cast(vocab.lookup_table.lookup(dec_tokens), tf.int32), 0)
    if pointer_gen:
        tgt = vocab_lib.target_ext_ids(dec_tokens, dec_ids, feats["oovs"], vocab.size)
    else:
        tgt = dec_ids
    b = tf.shape(dec_ids)[0]
    start = tf.fill([b, 1], vocab_lib.START_ID)
    dec_input = tf.concat([start, dec_ids], axis=1)[:, :max_dec_steps]  # [B, T]
    target = tf.concat([tgt, tf.zeros([b, 1], tf.int32)], axis=1)
    positions = tf.range(tf.shape(target)[1])[None, :]
    target = tf.where(tf.equal(positions, n[:, None]), vocab_lib.STOP_ID, target)
    target = target[:, :max_dec_steps]  # [B, T]
    dec_len = tf.minimum(n + 1, max_dec_steps)
    valid = tf.range(tf.shape(dec_input)[1])[None, :] < dec_len[:, None]
    feats.update(
        dec_input=tf.where(valid, dec_input, 0),
        target=tf.where(valid, target, 0),
        dec_len=dec_len,
        article=batch["article"],
        summary=batch["summary"],
        id=batch["id"],
    )
    return feats


def make_dataset(
    files: list[str],
    vocab: vocab_lib.Vocab,
    cfg: DataConfig,
    batch_size: int,
    pointer_gen: bool,
    training: bool,
    seed: int | None = None,
    drop_empty: bool | None = None,
    fixed_shapes: bool = False,
    skip: int = 0,
) -> tf.data.Dataset:
    """Batches of features (module docstring). Training: shuffled, repeated forever, bucketed by
    length (`bucket_batch`); evaluation: one pass in file order, every example kept, after the
    first `skip` records (train.eval_skip: pairs a report scores, which selection must not see).
    fixed_shapes pads each batch to its bucket's bounds instead of its longest member (a few
    shapes, for XLA).

    With data.cache_tokens, training reads and tokenizes the files once, in a shuffled file
    order, and later epochs replay those tokens from memory; without it (the default) every
    epoch reads and tokenizes the records again.

    Every record is CRC-checked as it is read: a corrupt one raises an InvalidArgumentError
    that tfrecord.read_error turns into "data file F has a corrupt or truncated record at byte
    offset N ...". Raises ValueError at once when training data holds no usable example."""
    drop_empty = training if drop_empty is None else drop_empty
    if training and drop_empty:
        require_usable_example(files, cfg)
    cache = training and cfg.cache_tokens
    # (file, size in bytes) pairs: the size tells checked_records where a good file ends.
    ds = tf.data.Dataset.from_tensor_slices((files, tfrecord.file_sizes(files)))
    if training:
        ds = ds.shuffle(len(files), seed=seed)
        if not cache:
            ds = ds.repeat()
    if skip and training:
        raise ValueError("make_dataset: skip is for evaluation data (one pass in file order)")
    ds = ds.interleave(
        tfrecord.checked_records,
        # evaluation reads the files one after another: "the first N records" means the same
        # records here as in the validation ROUGE's reader (training.validation.eval_rouge)
        cycle_length=min(4, len(files)) if training else 1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,  # a resumed run skips the batches consumed: the order must repeat
    )
    if skip:
        ds = ds.skip(skip)
    if cache:
        ds = ds.map(tfrecord.parse, num_parallel_calls=tf.data.AUTOTUNE)
        ds = tokenize_records(ds, cfg, drop_empty).cache().repeat()
        ds = ds.shuffle(cfg.shuffle_buffer, seed=seed)
    else:
        if training:
            ds = ds.shuffle(cfg.shuffle_buffer, seed=seed)
        ds = ds.map(tfrecord.parse, num_parallel_calls=tf.data.AUTOTUNE)
        ds = tokenize_records(ds, cfg, drop_empty)
    return batch_tokens(ds, vocab, cfg, batch_size, pointer_gen, training, fixed_shapes)


@tf.autograph.experimental.do_not_convert
def usable(record: dict) -> tf.Tensor:
    """bool []: the tokenized example has an article and a summary token."""
    return tf.logical_and(tf.size(record["enc_tokens"]) > 0, tf.size(record["dec_tokens"]) > 0)


def require_usable_example(files: list[str], cfg: DataConfig) -> None:
    """Raises ValueError if no record of the files has both an article and a summary token.

    The training dataset repeats forever and drops unusable examples; without one usable
    example it would spin at 100% CPU and never yield a batch. One pass in file order stops at
    the first usable record, so on real data this reads a few records."""
    found = (tfrecord.read_records(files).map(tfrecord.parse).map(tokenize_fn(cfg))
             .filter(usable).take(1).reduce(0, tfrecord.count))
    if int(found) == 0:
        raise ValueError(f"training data ({len(files)} file(s), first {files[0]}) holds no example "
                         f"whose article and summary both have a token; are the summaries empty?")


def tokenize_records(ds: tf.data.Dataset, cfg: DataConfig, drop_empty: bool) -> tf.data.Dataset:
    """Records {article, summary, id} (scalar strings) -> the same plus enc_tokens [<= L] and
    dec_tokens [<= T] (string), without the unusable examples when drop_empty."""
    ds = ds.map(tokenize_fn(cfg), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.filter(usable) if drop_empty else ds


def batch_records(ds: tf.data.Dataset, vocab: vocab_lib.Vocab, cfg: DataConfig, batch_size: int,
                  pointer_gen: bool, training: bool, drop_empty: bool) -> tf.data.Dataset:
    """Records {article, summary, id} (scalar strings) -> batches of features."""
    return batch_tokens(tokenize_records(ds, cfg, drop_empty), vocab, cfg, batch_size,
                        pointer_gen, training)


def bucketed(cfg: DataConfig) -> bool:
    """Whether training batches come from length buckets (`bucket_batch`): data.bucket_by_length,
    and articles of 8 tokens or more (one padded batch stream below that)."""
    return cfg.bucket_by_length and cfg.max_enc_steps >= 8


def equal_widths(length: int, n: int) -> list[int]:
    """Upper bounds (inclusive) of n equal-width buckets of 1..length, one a length where
    length < n (the last bound is length)."""
    n = min(n, length)
    return [length * k // n for k in range(1, n + 1)]  # strictly increasing as n <= length


def length_buckets(cfg: DataConfig) -> tuple[list[int], list[int]]:
    """Upper bounds (inclusive) of the training buckets: the article-token buckets are quarters
    of max_enc_steps; the summary-token buckets a quarter, half and all of max_dec_steps with
    data.bucket_by_summary_length, else one bucket of all. data.buckets_per_length = n > 0 cuts
    each length into n equal widths instead (fewer where a length has fewer than n tokens)."""
    enc, dec = cfg.max_enc_steps, cfg.max_dec_steps
    if cfg.buckets_per_length:
        return (equal_widths(enc, cfg.buckets_per_length),
                equal_widths(dec, cfg.buckets_per_length))
    enc_bounds = equal_widths(enc, 4)
    dec_bounds = [dec]
    if cfg.bucket_by_summary_length:
        dec_bounds = sorted({max(1, dec // 4), max(1, dec // 2), dec})
    return enc_bounds, dec_bounds


def bucket_batch(ds: tf.data.Dataset, cfg: DataConfig, batch_size: int, padded_shapes: dict,
                 padding_values: dict, fixed_shapes: bool) -> tf.data.Dataset:
    """Full batches of examples from the same (article length, summary length) bucket
    (`length_buckets`), padded to their longest member, or with fixed_shapes to the bucket's
    bounds. Tokenized examples in, padded token batches out; an example is in exactly one
    bucket, and a bucket's last examples short of a batch are dropped (training repeats).

    Both lengths matter: the encoder loop runs over the padded article, the decoder loop over
    the padded summary, at every position of the batch. With article buckets only, the batches
    are those of tf.data's bucket_by_sequence_length at the same bounds."""
    enc_bounds, dec_bounds = length_buckets(cfg)
    enc_b = tf.constant(enc_bounds, tf.int64)
    dec_b = tf.constant(dec_bounds, tf.int64)
    n_dec = len(dec_bounds)

    @tf.autograph.experimental.do_not_convert
    def key(d):  # int64 []: article bucket * n_dec + summary bucket
        e = tf.reduce_sum(tf.cast(tf.size(d["enc_tokens"], tf.int64) > enc_b[:-1], tf.int64))
        t = tf.reduce_sum(tf.cast(tf.size(d["dec_tokens"], tf.int64) > dec_b[:-1], tf.int64))
        return e * n_dec + t

    @tf.autograph.experimental.do_not_convert
    def reduce(k, window):
        shapes = padded_shapes
        if fixed_shapes:
            shapes = dict(padded_shapes, enc_tokens=enc_b[k // n_dec][None],
                          dec_tokens=dec_b[k % n_dec][None])
        return window.padded_batch(batch_size, padded_shapes=shapes,
                                   padding_values=padding_values, drop_remainder=True)

    return ds.group_by_window(key, reduce, window_size=batch_size)


def batch_tokens(ds: tf.data.Dataset, vocab: vocab_lib.Vocab, cfg: DataConfig, batch_size: int,
                 pointer_gen: bool, training: bool, fixed_shapes: bool = False
                 ) -> tf.data.Dataset:
    """Tokenized records (`tokenize_records`) -> batches of features (module docstring)."""
    pad = {"enc_tokens": [None], "dec_tokens": [None], "article": [], "summary": [], "id": []}
    pad_values = {k: "" for k in pad}
    if training and bucketed(cfg):
        ds = bucket_batch(ds, cfg, batch_size, pad, pad_values, fixed_shapes)
    else:
        if fixed_shapes:
            pad.update(enc_tokens=[cfg.max_enc_steps], dec_tokens=[cfg.max_dec_steps])
        ds = ds.padded_batch(
            batch_size, padded_shapes=pad, padding_values=pad_values, drop_remainder=training
        )
    ds = ds.map(
        tf.autograph.experimental.do_not_convert(
            lambda b: encode_batch(b, vocab, cfg.max_dec_steps, pointer_gen)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def build_vocab(files: list[str], cfg: DataConfig, verbose: int | None = None) -> vocab_lib.Vocab:
    """Counts article and summary tokens of the training records with the model's tokenizer
    (a progress bar of the records counted; verbose None: when stdout is a terminal)."""
    import collections

    counter: collections.Counter = collections.Counter()

    @tf.autograph.experimental.do_not_convert
    def tokens(d: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """A batch of records -> (its size, every article and summary token: string [N])."""
        summaries = tf.strings.regex_replace(d["summary"], "\n", " ")
        return tf.shape(d["article"])[0], tf.concat(
            [text.tokenize(d["article"], cfg.lowercase, cfg.replace_digits).flat_values,
             text.tokenize(summaries, cfg.lowercase, cfg.replace_digits).flat_values], axis=0)

    ds = tfrecord.read_records(files).map(tfrecord.parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(256).map(tokens, num_parallel_calls=tf.data.AUTOTUNE)
    bar, done = progress.progbar(None, "record", verbose), 0
    for n, batch_tokens in ds.as_numpy_iterator():
        counter.update(t.decode("utf-8") for t in batch_tokens)
        done += int(n)
        bar.update(done)
    bar.update(done, finalize=True)
    return vocab_lib.Vocab.from_counter(counter, cfg.vocab_size, cfg.min_count)


def read_split(path: str, fmt: str | None, limit: int | None) -> list[Example]:
    """The first `limit` examples (all with None) of any data path (format `fmt`, detected when
    None) as a list; UserError when the path matches nothing or holds no example."""
    fmt = fmt or detect_format(path)
    if fmt == "tfrecord":
        files = sorted(tf.io.gfile.glob(path))
        if not files:
            raise UserError(f"data path {path} matches no file")
        tfrecord.validate_tfrecords(files)
        it = tfrecord.read_tfrecords(path)
    else:
        src = path.split(":")[1] if fmt == "tfds" else path.split(",")[0]
        if not tf.io.gfile.exists(src):
            raise UserError(f"data path {src} does not exist")
        it = read_examples(path, fmt, ReadStats())
    out: list[Example] = []
    for ex in it:
        if limit is not None and len(out) >= limit:
            break
        out.append(ex)
    if not out:
        raise UserError(f"data path {path} holds no examples")
    return out
