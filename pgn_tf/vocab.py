"""Vocabulary: See et al.'s "word count" file, lookup tables and the in-graph extended vocab.

Ids 0-3 are the special tokens [PAD] [UNK] [START] [STOP]; the file lists the other words, most
frequent first, one "word count" line each. `vocab_size` counts the special tokens (as See et
al.'s code does), so a 50k vocab holds 49,996 words from the file.

Extended vocabulary (See et al. section 2.2): per article, source tokens not in the
vocab get ids vocab_size + k, k the order of first occurrence among that article's OOVs; target
OOVs that occur in the article get the same id, other target OOVs [UNK].
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable

import tensorflow as tf

PAD, UNK, START, STOP = "[PAD]", "[UNK]", "[START]", "[STOP]"
SPECIAL_TOKENS = (PAD, UNK, START, STOP)
PAD_ID, UNK_ID, START_ID, STOP_ID = 0, 1, 2, 3


class Vocab:
    """An id <-> word mapping with its tf.lookup tables.

    Args:
      words: the non-special words, most frequent first.
      counts: their counts (kept only to write the file back).
    """

    def __init__(self, words: list[str], counts: list[int] | None = None):
        seen = set(SPECIAL_TOKENS)
        self.words = list(SPECIAL_TOKENS)
        self.counts = [0] * len(SPECIAL_TOKENS)
        for i, w in enumerate(words):
            if w in seen or not w or any(c.isspace() for c in w):
                continue
            seen.add(w)
            self.words.append(w)
            self.counts.append(counts[i] if counts else 0)
        self._word_to_id = None
        self._lookup = None
        self._reverse = None

    @property
    def size(self) -> int:
        return len(self.words)

    def __len__(self) -> int:
        return self.size

    def word_to_id(self, word: str) -> int:
        if self._word_to_id is None:
            self._word_to_id = {w: i for i, w in enumerate(self.words)}
        return self._word_to_id.get(word, UNK_ID)

    @classmethod
    def load(cls, path: str, max_size: int | None = None) -> Vocab:
        """Reads a "word count" file; keeps the first max_size - 4 words."""
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"vocab file {path} does not exist")
        words, counts = [], []
        limit = None if max_size is None else max_size - len(SPECIAL_TOKENS)
        with tf.io.gfile.GFile(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if not line.strip():
                    continue
                parts = line.rsplit(" ", 1)
                word = parts[0]
                try:
                    count = int(parts[1]) if len(parts) == 2 else 0
                except ValueError:
                    raise ValueError(
                        f"vocab file {path} line {lineno}: expected 'word count', got {line!r}"
                    ) from None
                if word in SPECIAL_TOKENS:
                    continue
                words.append(word)
                counts.append(count)
                if limit is not None and len(words) >= limit:
                    break
        if not words:
            raise ValueError(f"vocab file {path} holds no words")
        return cls(words, counts)

    def save(self, path: str) -> None:
        """Writes the file atomically (temp file + rename)."""
        tmp = path + ".tmp"
        with tf.io.gfile.GFile(tmp, "w") as f:
            for w, c in zip(self.words[len(SPECIAL_TOKENS) :], self.counts[len(SPECIAL_TOKENS) :]):
                f.write(f"{w} {c}\n")
        tf.io.gfile.rename(tmp, path, overwrite=True)

    @classmethod
    def from_counter(
        cls, counter: collections.Counter, max_size: int, min_count: int = 1
    ) -> Vocab:
        # Ties broken by the word itself so the vocab is deterministic.
        items = sorted(
            ((w, c) for w, c in counter.items() if c >= min_count and w not in SPECIAL_TOKENS),
            key=lambda wc: (-wc[1], wc[0]),
        )[: max_size - len(SPECIAL_TOKENS)]
        return cls([w for w, _ in items], [c for _, c in items])

    @property
    def lookup_table(self) -> tf.lookup.StaticHashTable:
        """string -> int64 id, [UNK] for anything else. Built once, reused by every caller."""
        if self._lookup is None:
            # Created eagerly even when first asked for inside a traced function (a tf.data map),
            # so every dataset, step function and export shares the one table.
            with tf.init_scope():
                init = tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.words), tf.range(self.size, dtype=tf.int64)
                )
                self._lookup = tf.lookup.StaticHashTable(init, default_value=UNK_ID)
        return self._lookup

    @property
    def words_tensor(self) -> tf.Tensor:
        if self._reverse is None:
            with tf.init_scope():
                self._reverse = tf.constant(self.words)
        return self._reverse


def count_tokens(token_lists: Iterable[Iterable[str]]) -> collections.Counter:
    counter: collections.Counter = collections.Counter()
    for tokens in token_lists:
        counter.update(tokens)
    return counter


def first_positions(keys: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """For each position i of integer keys [B, L]: the first valid position j of
    its row with keys[j] == keys[i], for a valid i; i itself for an invalid one. int32 [B, L].

    By a stable sort of each row, not the [B, L, L] comparison of every pair: at See et al.'s
    400-token articles that comparison and its int32 copy were 49 MiB for a batch of 64, the
    largest temporaries of a search's encoding (research/records/2026-11-29-decoding-bans-in-place.md).
    """
    b, length = tf.shape(keys)[0], tf.shape(keys)[1]
    order = tf.argsort(keys, axis=1, stable=True)  # equal keys in position order
    sorted_keys = tf.gather(keys, order, batch_dims=1)
    new_run = tf.concat([tf.ones([b, 1], tf.bool),
                         tf.not_equal(sorted_keys[:, 1:], sorted_keys[:, :-1])], axis=1)
    new_run = new_run[:, :length]  # (no positions: no runs)
    run = tf.cumsum(tf.cast(new_run, tf.int32), axis=1) - 1 + tf.range(b)[:, None] * length
    # each run's first valid position (length where it has none)
    candidate = tf.where(tf.gather(valid, order, batch_dims=1), order, length)
    first = tf.gather(tf.math.unsorted_segment_min(candidate, run, b * length), run)  # sorted
    rows = tf.broadcast_to(tf.range(b)[:, None], [b, length])
    first = tf.scatter_nd(tf.stack([rows, order], axis=2), first, [b, length])  # unsorted
    return tf.where(valid, first, tf.range(length)[None, :])


def extend_vocab(
    enc_tokens: tf.Tensor, enc_ids: tf.Tensor, enc_mask: tf.Tensor, vocab_size: int
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-article extended-vocabulary ids, vectorised over the batch.

    Args:
      enc_tokens: string [batch, src_len] (padding "").
      enc_ids: int [batch, src_len], in-vocab ids with [UNK] for OOVs.
      enc_mask: bool [batch, src_len].
      vocab_size: V.

    Returns:
      enc_ext_ids: int32 [batch, src_len], OOV k of the article -> V + k.
      oovs: string [batch, max_oovs] the article's OOV words in first-occurrence order ("" pad).
      num_oovs: int32 [batch].
    """
    enc_ids = tf.cast(enc_ids, tf.int32)
    is_oov = tf.logical_and(tf.equal(enc_ids, UNK_ID), enc_mask)  # [B, L]
    # Hashed, so that the OOVs are matched on int64, not strings.
    h = tf.strings.to_hash_bucket_fast(enc_tokens, 2**62)  # [B, L]
    first = first_positions(h, is_oov)  # [B, L]: an OOV's first position
    positions = tf.range(tf.shape(enc_ids)[1])[None, :]
    is_first = tf.logical_and(is_oov, tf.equal(first, positions))  # [B, L]
    rank = tf.cumsum(tf.cast(is_first, tf.int32), axis=1) - 1  # [B, L]: OOV index at firsts
    oov_index = tf.gather(rank, first, batch_dims=1)  # [B, L]
    enc_ext_ids = tf.where(is_oov, vocab_size + oov_index, enc_ids)
    oovs = tf.ragged.boolean_mask(enc_tokens, is_first).to_tensor(default_value="")
    num_oovs = tf.reduce_sum(tf.cast(is_first, tf.int32), axis=1)
    return enc_ext_ids, oovs, num_oovs


def target_ext_ids(
    dec_tokens: tf.Tensor, dec_ids: tf.Tensor, oovs: tf.Tensor, vocab_size: int
) -> tf.Tensor:
    """Target ids over the extended vocab: an OOV present in the article gets its copy id.

    Args:
      dec_tokens: string [batch, tgt_len]; dec_ids: int [batch, tgt_len] ([UNK] for OOVs);
      oovs: string [batch, max_oovs] from extend_vocab().
    Returns: int32 [batch, tgt_len].
    """
    dec_ids = tf.cast(dec_ids, tf.int32)
    oovs = tf.pad(oovs, [[0, 0], [0, 1]])  # a batch without OOVs would leave argmax no axis
    match = tf.logical_and(
        tf.equal(dec_tokens[:, :, None], oovs[:, None, :]), tf.not_equal(oovs, "")[:, None, :]
    )  # [B, T, M]
    found = tf.reduce_any(match, axis=-1)
    idx = tf.argmax(tf.cast(match, tf.int32), axis=-1, output_type=tf.int32)
    return tf.where(tf.logical_and(tf.equal(dec_ids, UNK_ID), found), vocab_size + idx, dec_ids)


def ids_to_words(ids: tf.Tensor, words: tf.Tensor, oovs: tf.Tensor) -> tf.Tensor:
    """Maps ids over the extended vocab back to strings.

    ids: int [batch, len]; words: string [V]; oovs: string [batch, max_oovs] -> string [batch, len].
    """
    ids = tf.cast(ids, tf.int32)
    v = tf.shape(words)[0]
    in_vocab = tf.gather(words, tf.minimum(ids, v - 1))
    # Pad oovs by one column so an index past the article's OOVs reads "" instead of failing.
    oovs = tf.pad(oovs, [[0, 0], [0, 1]])
    oov_idx = tf.clip_by_value(ids - v, 0, tf.shape(oovs)[1] - 1)
    copied = tf.gather(oovs, oov_idx, batch_dims=1)
    return tf.where(ids < v, in_vocab, copied)


def replace_unk_ids(ids: tf.Tensor, src_pos: tf.Tensor, enc_ext_ids: tf.Tensor,
                    enc_len: tf.Tensor) -> tf.Tensor:
    """OpenNMT's replace_unk on ids: each [UNK] becomes the extended-vocab id of the source word
    its step attended most (src_pos, the searches' argmax of attention); a position past the
    article (or an empty article) leaves it [UNK]. ids, src_pos: int [B, T]; enc_ext_ids int
    [B, L]; enc_len int [B] -> int32 [B, T]. `ids_to_words` turns the result into the words."""
    ids, src_pos = tf.cast(ids, tf.int32), tf.cast(src_pos, tf.int32)
    source = tf.cast(enc_ext_ids, tf.int32)
    attended = tf.gather(source, tf.minimum(src_pos, tf.shape(source)[1] - 1), batch_dims=1)
    real = src_pos < tf.cast(enc_len, tf.int32)[:, None]
    return tf.where(tf.equal(ids, UNK_ID) & real, attended, ids)


def vocab_path_for(model_dir: str, configured: str) -> str:
    return configured or os.path.join(model_dir, "vocab.txt")
