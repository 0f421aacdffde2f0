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
"""

from __future__ import annotations

import hashlib
import os

import tensorflow as tf

from pgn_tf import text
from pgn_tf import vocab as vocab_lib
from pgn_tf.config import DataConfig
from pgn_tf.data import tfrecord
from pgn_tf.data.example import ReadStats

FORMATS = ("tfrecord", "jsonl", "story", "see_bin", "tfds", "parallel")

# The numeric features a model and its objective read (the strings stay out of the train step).
MODEL_FEATURES = ("enc_ids", "enc_ext_ids", "enc_len", "num_oovs", "dec_input", "target",
                  "dec_len")


def model_features(batch: dict) -> dict:
    """A batch (module docstring) -> the MODEL_FEATURES only."""
    return {k: batch[k] for k in MODEL_FEATURES}


def detect_format(path: str) -> str:
    from pgn_tf.data import parallel

    if path.startswith("tfds:"):
        return "tfds"
    if parallel.is_parallel(path):
        return "parallel"
    if tf.io.gfile.isdir(path):
        return "story"
    base = path.lower()
    if base.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".json")):
        return "jsonl"
    if base.endswith(".bin"):
        return "see_bin"
    return "tfrecord"


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
    raise ValueError(f"unknown data format '{fmt}' (one of {', '.join(FORMATS)})")


def resolve_files(path: str, cache_dir: str, fmt: str | None = None) -> list[str]:
    """TFRecord files for a data path of any format.

    TFRecords (a file or glob) are used in place and validated; other formats are converted
    once into `cache_dir` (keyed by the source's name, size and mtime) and reused after.
    Raises ValueError naming the path when it is missing, empty or unreadable.
    """
    if not path:
        raise ValueError("no data path given")
    fmt = fmt or detect_format(path)
    if fmt == "tfrecord":
        files = sorted(tf.io.gfile.glob(path))
        if not files:
            raise ValueError(f"data path {path} matches no file")
        n = tfrecord.validate_tfrecords(files)
        if n == 0:
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
    tf.io.gfile.makedirs(cache_dir)
    stats = ReadStats()
    files = tfrecord.write_tfrecords(read_examples(path, fmt, stats), prefix, 1)
    if stats.kept == 0:
        for fn in files:
            tf.io.gfile.remove(fn)
        raise ValueError(f"data path {path} holds no usable examples ({stats.summary()})")
    with tf.io.gfile.GFile(done, "w") as f:
        f.write(stats.summary() + "\n")
    if stats.dropped:
        print(f"[pgn_tf] {path}: {stats.summary()}")
    return files


def tokenize_fn(cfg: DataConfig):
    """Per-example map: raw strings -> article tokens [<= L] and summary tokens [<= T]."""

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
) -> tf.data.Dataset:
    """Batches of features (module docstring). Training: tokenized once and kept in memory
    (data.cache_tokens), shuffled, repeated forever, bucketed by article and summary length
    (`bucket_batch`); evaluation: one pass in file order, every example kept. fixed_shapes
    pads every batch to its bucket's bounds (a few shapes, for XLA)."""
    drop_empty = training if drop_empty is None else drop_empty
    ds = tf.data.Dataset.from_tensor_slices(files)
    if training:
        ds = ds.shuffle(len(files), seed=seed)
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(4, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,  # a resumed run skips the batches consumed: the order must repeat
    )
    ds = tokenize_records(ds.map(tfrecord.parse, num_parallel_calls=tf.data.AUTOTUNE), cfg,
                          drop_empty)
    if training:
        if cfg.cache_tokens:  # later epochs replay the first one's tokens (and file order)
            ds = ds.cache()
        ds = ds.repeat().shuffle(cfg.shuffle_buffer, seed=seed)
    return batch_tokens(ds, vocab, cfg, batch_size, pointer_gen, training, fixed_shapes)


def tokenize_records(ds: tf.data.Dataset, cfg: DataConfig, drop_empty: bool) -> tf.data.Dataset:
    """Records {article, summary, id} (scalar strings) -> the same plus enc_tokens [<= L] and
    dec_tokens [<= T] (string), without the examples whose article or summary is empty when
    drop_empty."""
    ds = ds.map(tokenize_fn(cfg), num_parallel_calls=tf.data.AUTOTUNE)
    if drop_empty:
        ds = ds.filter(
            lambda d: tf.logical_and(tf.size(d["enc_tokens"]) > 0, tf.size(d["dec_tokens"]) > 0)
        )
    return ds


def batch_records(ds: tf.data.Dataset, vocab: vocab_lib.Vocab, cfg: DataConfig, batch_size: int,
                  pointer_gen: bool, training: bool, drop_empty: bool,
                  fixed_shapes: bool = False) -> tf.data.Dataset:
    """Records {article, summary, id} (scalar strings) -> batches of features."""
    return batch_tokens(tokenize_records(ds, cfg, drop_empty), vocab, cfg, batch_size,
                        pointer_gen, training, fixed_shapes)


def length_buckets(cfg: DataConfig) -> tuple[list[int], list[int]]:
    """Upper bounds (inclusive) of the article-token and summary-token buckets: quarters of
    max_enc_steps, and a quarter, half and all of max_dec_steps."""
    enc, dec = cfg.max_enc_steps, cfg.max_dec_steps
    enc_bounds = sorted({max(1, enc * k // 4) for k in (1, 2, 3, 4)})
    dec_bounds = sorted({max(1, dec // 4), max(1, dec // 2), dec})
    return enc_bounds, dec_bounds


def bucket_batch(ds: tf.data.Dataset, cfg: DataConfig, batch_size: int, padded_shapes: dict,
                 padding_values: dict, fixed_shapes: bool) -> tf.data.Dataset:
    """Full batches of examples from the same (article length, summary length) bucket
    (`length_buckets`), padded to the longest member, or with fixed_shapes to the bucket's
    bounds. Tokenized examples in, padded token batches out.

    Both lengths matter: the encoder loop runs over the padded article, the decoder loop over
    the padded summary, at every position of the batch."""
    enc_bounds, dec_bounds = length_buckets(cfg)
    enc_b = tf.constant(enc_bounds, tf.int64)
    dec_b = tf.constant(dec_bounds, tf.int64)
    n_dec = len(dec_bounds)

    def key(d):
        e = tf.reduce_sum(tf.cast(tf.size(d["enc_tokens"], tf.int64) > enc_b[:-1], tf.int64))
        t = tf.reduce_sum(tf.cast(tf.size(d["dec_tokens"], tf.int64) > dec_b[:-1], tf.int64))
        return e * n_dec + t

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
    if training and cfg.bucket_by_length and cfg.max_enc_steps >= 8:
        ds = bucket_batch(ds, cfg, batch_size, pad, pad_values, fixed_shapes)
    else:
        if fixed_shapes:
            pad.update(enc_tokens=[cfg.max_enc_steps], dec_tokens=[cfg.max_dec_steps])
        ds = ds.padded_batch(
            batch_size, padded_shapes=pad, padding_values=pad_values, drop_remainder=training
        )
    ds = ds.map(
        lambda b: encode_batch(b, vocab, cfg.max_dec_steps, pointer_gen),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def build_vocab(files: list[str], cfg: DataConfig) -> vocab_lib.Vocab:
    """Counts article and summary tokens of the training records with the model's tokenizer."""
    import collections

    counter: collections.Counter = collections.Counter()
    ds = tf.data.TFRecordDataset(files).map(tfrecord.parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(256).map(
        lambda d: tf.concat(
            [
                text.tokenize(d["article"], cfg.lowercase, cfg.replace_digits).flat_values,
                text.tokenize(
                    tf.strings.regex_replace(d["summary"], "\n", " "),
                    cfg.lowercase,
                    cfg.replace_digits,
                ).flat_values,
            ],
            axis=0,
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    for tokens in ds.as_numpy_iterator():
        counter.update(t.decode("utf-8") for t in tokens)
    return vocab_lib.Vocab.from_counter(counter, cfg.vocab_size, cfg.min_count)
