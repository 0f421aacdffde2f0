"""A vocabulary shortlist for decoding (decode.shortlist): each batch's candidate words, and the
maps between vocabulary ids and the candidate columns the output layer runs over.

A summary is written mostly in words of its article and a few thousand frequent words, and a
pointer-generator copies the rare ones from the article anyway (See et al. 2017). Marian's
lexical shortlists and CTranslate2's `vocabulary_mapping` restrict the output layer to a
per-batch candidate set on CPUs for this reason: at the reference sizes the [H, V] product, the
softmax and the top-k over V are most of a decoding step. With decode.shortlist = K > 0 a
batch's candidate columns are, in ascending id order:
  - the four special tokens ([PAD], [UNK], [START], [STOP]: the constraints and the search
    need them) and the K most frequent words (pgn_tf.vocab orders a vocabulary by its words'
    counts over the training articles and summaries, so these are ids 4 .. K + 3);
  - every vocabulary word of the batch's articles, so that the copy mass of an article word
    lands on its own column (See et al. eq. 9 stays exact for it);
  - topped up with the next most frequent words to a multiple of COLUMN_MULTIPLE columns, or
    to the whole vocabulary: a compiled step (decode.jit_step) sees a few widths only, each
    compiled once, and every column is a real word, so no column needs masking.
The vocabulary layer runs on the candidates' kernel columns and biases, gathered once a batch
(`candidates`, with the model's `shortlist_projection`), and the softmax over them equals the
full softmax renormalised over the candidate set: exp(z_j) / sum_{i in C} exp(z_i) =
P_vocab(j) / sum_{i in C} P_vocab(i). A word outside the set has probability 0. Out-of-vocabulary
article words keep their extended ids V + i, and the search sees vocabulary ids throughout:
the maps (`to_vocab`, and a Mixture's `columns` and `position`, decoding.mixture) translate.

The renormalised softmax gives every candidate word P_vocab(j) / P_vocab(C), more than its
full probability by the mass outside C, and so favours a generated word over a copied one
(eq. 9's p_gen P_vocab against (1 - p_gen) sum a_i). Over a multi-sentence summary those
shifts add up: on the digests' 50k vocabulary a small K changed many summaries though no
full-vocabulary summary wrote a word outside C (docs/summarizing.md). With
decode.shortlist_tail = m > 0 the mass outside C is estimated from m of its words
(`tail_sample`): the outside ids, in ascending (frequency) order, taken at m even steps, each
standing for (V - C) / m words, so that
Z_rest ~ (V - C) / m * sum_s exp(z_s) and P_vocab(j) ~ exp(z_j) / (Z_C + Z_rest). A sample
word stands for the words of its own frequency band, whose biases are alike. The estimate is
exact when m is a multiple of V - C (each outside word then taken m / (V - C) times), and
costs an [H, m] product a step.

Core TensorFlow ops only: an export runs them under stock TF Serving.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.layers.pointer import SHORTLIST_KEY as KEY
from pgn_tf.layers.pointer import shortlist_to_vocab as to_vocab
from pgn_tf.vocab import SPECIAL_TOKENS

__all__ = ["KEY", "candidate_columns", "candidates", "positions", "tail_sample", "to_vocab"]

COLUMN_MULTIPLE = 128  # the candidate columns are padded up to a multiple of this


def candidate_columns(enc_ids: tf.Tensor, vocab_size: int, frequent: int,
                      multiple: int = COLUMN_MULTIPLE) -> tf.Tensor:
    """The batch's candidate words (module docstring), int32 [C] ascending vocabulary ids, C a
    multiple of `multiple` or V. enc_ids: int32 [B, L], the articles' vocabulary ids ([UNK]
    for an out-of-vocabulary word, [PAD] at padding: every id below V)."""
    ids = tf.reshape(tf.cast(enc_ids, tf.int32), [-1, 1])
    in_article = tf.scatter_nd(ids, tf.ones_like(ids[:, 0]), [vocab_size]) > 0  # [V]
    member = in_article | (tf.range(vocab_size) < len(SPECIAL_TOKENS) + frequent)
    n = tf.reduce_sum(tf.cast(member, tf.int32))
    width = tf.minimum((n + multiple - 1) // multiple * multiple, vocab_size)
    # the most frequent words left out, as many as the padding needs
    top_up = ~member & (tf.cumsum(tf.cast(~member, tf.int32)) <= width - n)
    return tf.cast(tf.where(member | top_up)[:, 0], tf.int32)


def positions(columns: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """int32 [V]: each vocabulary id's column in `columns` (int32 [C]), C where it has none
    (`to_vocab` reads that column as a word of probability 0)."""
    c = tf.size(columns)
    return tf.tensor_scatter_nd_update(tf.fill([vocab_size], c), columns[:, None],
                                       tf.range(c))


def tail_sample(position: tf.Tensor, columns: tf.Tensor,
                size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(ids int32 [size], log_weight float32 []): `size` of the vocabulary ids without a
    column (position int32 [V], `positions` of columns int32 [C]: C where an id has none), at
    even steps through them in ascending order, and the log of the number of outside ids each
    stands for, log((V - C) / size); -inf when every id has a column (nothing is outside: the
    ids are then [PAD]s that count for nothing)."""
    outside = tf.cast(tf.where(position >= tf.size(columns))[:, 0], tf.int32)  # [V - C]
    t = tf.size(outside)
    step = (tf.range(size, dtype=tf.float32) + 0.5) * tf.cast(t, tf.float32) / size
    at = tf.where(t > 0, tf.minimum(tf.cast(step, tf.int32), t - 1), t)  # t: the [PAD] below
    ids = tf.gather(tf.concat([outside, [0]], 0), at)
    log_weight = tf.where(t > 0, tf.math.log(tf.cast(t, tf.float32) / size), float("-inf"))
    return ids, log_weight


def candidates(enc_ids: tf.Tensor, vocab_size: int, frequent: int, tail: int = 0) -> dict:
    """The batch's shortlist as a search state holds it (under SHARED, KEY): columns int32 [C]
    (`candidate_columns`) and position int32 [V] (`positions`); with tail = m > 0 (the
    mass outside C estimated, module docstring) also tail_ids int32 [m] and tail_log_weight
    float32 [] (`tail_sample`). The caller adds the output layer's kernel [H, C] and bias
    [C] at those columns (the model's `shortlist_projection`), and at the tail's ids,
    once for the whole search."""
    columns = candidate_columns(enc_ids, vocab_size, frequent)
    short = {"columns": columns, "position": positions(columns, vocab_size)}
    if tail:
        short["tail_ids"], short["tail_log_weight"] = tail_sample(short["position"], columns,
                                                                  tail)
    return short
