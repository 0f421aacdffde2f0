"""The pointer-generator mixture of See et al. (2017), section 2.2.

    p_gen = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)                   (8)
    P(w)  = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t                   (9)

`final_distribution` builds P over the extended vocabulary with a scatter-add (decoding);
`target_log_prob` computes log P(w*) for the reference words only, without materialising the
[batch, time, vocab + oovs] tensor (training): the two agree (tests/layers/test_pointer.py).
Its two halves, `vocab_log_prob` and `mix_copy`, let the vocabulary part run on the real
(non-padding) target positions alone. `Mixture` holds eq. 9 in parts, for a beam search that
scores only the tokens that can win; `dense_distribution` is its dense form.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

from pgn_tf.ops import bincount_grad  # noqa: F401  (registers DenseBincount's gradient)
from pgn_tf.ops.log_softmax_at import log_softmax_at
from pgn_tf.vocab import first_positions

_NEG = -1e30  # log-probability of an impossible event; finite, so no inf - inf = NaN


class PointerSwitch(keras.layers.Layer):
    """The generation probability gate, eq. 8, as a logit (sigmoid applied by the caller in log
    space for stability).

    Call args: features: list of float32 [batch, d_k] tensors, concatenated (See et al.'s code
    uses [h*_t, s_t.c, s_t.h, x_t]: 2H + H + H + E inputs, plus b_ptr = 1153 weights for the
    paper's sizes). Returns: float32 [batch, 1] logit.

    Example:
      >>> sw = PointerSwitch(); sw.build(6)
      >>> p_gen = tf.sigmoid(sw([tf.zeros([2, 4]), tf.zeros([2, 2])]))
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1, name="p_gen")

    def build(self, input_dim: int):
        self.dense.build((None, input_dim))
        self.built = True

    def call(self, features):
        return self.dense(tf.concat(features, axis=-1))


def scatter_copy(attn: tf.Tensor, enc_ext_ids: tf.Tensor, ext_size,
                 fused: bool = True) -> tf.Tensor:
    """sum_{i: w_i = w} a_i for every w of the extended vocab.

    attn: float [batch, src_len]; enc_ext_ids: int32 [batch, src_len] -> float [batch, ext_size].
    fused (model.rnn_impl = "fused"): a weighted bincount per row (duplicates add up), faster
    on CPU than the equivalent scatter of [B, L] updates (docs/performance.md), whose gradient
    TF lacks (pgn_tf.ops.bincount_grad registers it); else an unsorted segment sum over the
    flattened rows, differentiated by TF.
    """
    ids = tf.cast(enc_ext_ids, tf.int32)
    if fused:
        return tf.math.bincount(ids, weights=attn, minlength=ext_size, maxlength=ext_size,
                                axis=-1, dtype=attn.dtype)
    rows = tf.shape(ids)[0]
    segments = ids + tf.range(rows)[:, None] * ext_size  # [B, L]: row b's ids offset by b * W
    flat = tf.math.unsorted_segment_sum(attn, segments, rows * ext_size)  # [B * W]
    return tf.reshape(flat, [rows, ext_size])


def final_distribution(
    vocab_dist: tf.Tensor,
    attn: tf.Tensor,
    p_gen: tf.Tensor,
    enc_ext_ids: tf.Tensor,
    num_extra: tf.Tensor,
    fused: bool = True,
) -> tf.Tensor:
    """Eq. 9 over the extended vocabulary.

    Args:
      vocab_dist: float [batch, V]; attn: float [batch, src_len]; p_gen: float [batch, 1];
      enc_ext_ids: int32 [batch, src_len]; num_extra: scalar int, the OOV slots M;
      fused: scatter_copy's.
    Returns: float [batch, V + M].
    """
    vocab_part = tf.pad(p_gen * vocab_dist, [[0, 0], [0, num_extra]])
    ext_size = tf.shape(vocab_dist)[1] + num_extra
    return vocab_part + scatter_copy((1.0 - p_gen) * attn, enc_ext_ids, ext_size, fused)


class Mixture(NamedTuple):
    """A pointer model's next-token distribution in parts (See et al. 2017 eq. 9):
    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: ext_ids_i = w} attn_i, for a search that
    scores only the tokens that can rank among the best (pgn_tf.decoding.mixture's
    `mixture_candidates`) instead of forming P over the whole extended vocabulary.

    logits float32 [N, V] (P_vocab's, before the softmax: a consumer takes the softmax itself
    and so owns the [N, V] buffer, which the beam search then edits in place); p_gen float32
    [N]; attn float32 [N, L]; ext_ids int32 [N, L] (extended ids of the source positions);
    slot int32 [N, L] and first bool [N, L] (`copy_slots`); width int32 scalar: V + the OOV
    slots (the dense distribution's width). With a vocabulary shortlist
    (pgn_tf.decoding.shortlist) the logits cover its C candidate columns only, [N, C]:
    columns int32 [C] holds the vocabulary id of each column and position int32 [V] each id's
    column (C: none); both None without one (column j is id j). vocab_scale float32 [N] (or
    None: 1) scales P_vocab: a shortlist's estimate of the share of the full softmax its
    candidates hold (decode.shortlist_tail), so that P(w) = p_gen s P_vocab(w) + the copy.
    """

    logits: tf.Tensor
    p_gen: tf.Tensor
    attn: tf.Tensor
    ext_ids: tf.Tensor
    slot: tf.Tensor
    first: tf.Tensor
    width: tf.Tensor
    columns: tf.Tensor | None = None
    position: tf.Tensor | None = None
    vocab_scale: tf.Tensor | None = None


# The entry of a search state's SHARED dict holding a batch's vocabulary shortlist
# (pgn_tf.decoding.shortlist builds it; the models' steps read it).
SHORTLIST_KEY = "shortlist"


def shortlist_to_vocab(x: tf.Tensor, position: tf.Tensor, fill: float = 0.0) -> tf.Tensor:
    """x float [N, C] over a shortlist's candidate columns -> [N, V] over the vocabulary
    (position int32 [V]: each id's column, C where it has none), `fill` for a word without a
    column (0 for a probability; a log-probability's floor for log-probs)."""
    padded = tf.pad(x, [[0, 0], [0, 1]], constant_values=fill)  # column C: a word without one
    return tf.gather(padded, position, axis=1)


def vocab_width(x: tf.Tensor):
    """V, the width of P_vocab or its logits x [N, V]: the static width where the graph knows
    it (the output layer's units), so that no op reads x for it (a reader holds x's buffer,
    which the decoding step would otherwise reuse: pgn_tf.decoding.mixture)."""
    width = x.shape[-1]
    return tf.constant(width, tf.int32) if width is not None else tf.shape(x)[-1]


def mixture_columns(mix: Mixture):
    """The columns of a Mixture's logits: V, or a shortlist's C (its `columns`' static size
    where the graph knows it: no op then reads the logits, vocab_width)."""
    if mix.columns is None:
        return vocab_width(mix.logits)
    size = mix.columns.shape[0]
    return tf.constant(size, tf.int32) if size is not None else tf.size(mix.columns)


def mixture_vocab(mix: Mixture):
    """V, the vocabulary a Mixture's columns are drawn from (its `position`'s static size)."""
    if mix.position is None:
        return vocab_width(mix.logits)
    return vocab_width(mix.position[None, :])


def copy_slots(ext_ids: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(slot int32 [B, L], first bool [B, L]) for source ids ext_ids int32 [B, L] and mask
    bool [B, L] (real tokens): slot[i] is the first real position holding position i's id (i
    itself for padding), first[i] that i is a real position and its id's first. Computed once
    an article, for `Mixture`: the copy probability of an id is its attention summed over the
    positions of one slot."""
    slot = first_positions(ext_ids, mask)
    return slot, mask & tf.equal(slot, tf.range(tf.shape(ext_ids)[1])[None, :])


def dense_distribution(mix: Mixture) -> tf.Tensor:
    """log P over the whole extended vocabulary, float32 [N, W]: the dense form of a Mixture,
    as a pointer model's step returns it without `mixture` (for greedy search, sampling and
    the rescoring features, which read every column)."""
    vocab_dist = tf.nn.softmax(mix.logits)
    if mix.vocab_scale is not None:
        vocab_dist *= mix.vocab_scale[:, None]
    if mix.position is not None:  # a shortlist's columns: the other words have probability 0
        vocab_dist = shortlist_to_vocab(vocab_dist, mix.position)
    probs = final_distribution(vocab_dist, mix.attn, mix.p_gen[:, None], mix.ext_ids,
                               mix.width - mixture_vocab(mix))
    return tf.math.log(tf.maximum(probs, 1e-30))


def vocab_log_prob(logits: tf.Tensor, target: tf.Tensor, fused: bool = True) -> tf.Tensor:
    """log P_vocab(w*) (eq. 4) of each target: float32 [...] for logits float [..., V] and
    target int32 [...] (any leading shape, e.g. [batch, T] or the [N] real target positions):
    the target's logit minus the log-sum-exp of the logits, _NEG where the target is an
    extended-vocab id (>= V). fused (model.rnn_impl = "fused"): with the gradient written out
    (pgn_tf.ops.log_softmax_at), else differentiated by TF."""
    logits = tf.cast(logits, tf.float32)
    v = tf.shape(logits)[-1]
    target = tf.cast(target, tf.int32)
    flat_logits = tf.reshape(logits, [-1, v])  # [N, V]
    flat_target = tf.reshape(tf.minimum(target, v - 1), [-1])  # [N]
    if fused:
        flat = log_softmax_at(flat_logits, flat_target)
    else:
        flat = (tf.gather(flat_logits, flat_target, batch_dims=1)
                - tf.reduce_logsumexp(flat_logits, axis=-1))
    return tf.where(target < v, tf.reshape(flat, tf.shape(target)), _NEG)


def mix_copy(
    log_p_vocab: tf.Tensor,
    target: tf.Tensor,
    attn: tf.Tensor,
    p_gen_logit: tf.Tensor,
    enc_ext_ids: tf.Tensor,
) -> tf.Tensor:
    """log P(w*_t) of eq. 9 from log P_vocab(w*_t), in log space:
    logsumexp(log p_gen + log P_vocab(w*), log(1 - p_gen) + log sum_{i: w_i = w*} a_i^t).

    Args:
      log_p_vocab: float32 [batch, T] (vocab_log_prob); target: int32 [batch, T] extended ids;
      attn: float [batch, T, src_len]; p_gen_logit: float [batch, T]; enc_ext_ids: int32
        [batch, src_len].
    Returns: float32 [batch, T]. Finite for p_gen in {0, 1}, for targets absent from both
    distributions, and for empty articles (attn all zero).
    """
    attn = tf.cast(attn, tf.float32)
    hit = tf.cast(tf.equal(enc_ext_ids[:, None, :], target[:, :, None]), tf.float32)
    copy = tf.reduce_sum(attn * hit, axis=-1)  # [B, T]
    # log(copy) where it is positive; the clamp's zero gradient keeps copy = 0 NaN-free.
    log_copy = tf.where(copy > 0, tf.math.log(tf.maximum(copy, 1e-30)), _NEG)
    z = tf.cast(p_gen_logit, tf.float32)
    return tf.reduce_logsumexp(
        tf.stack([tf.math.log_sigmoid(z) + log_p_vocab, tf.math.log_sigmoid(-z) + log_copy], -1),
        axis=-1,
    )


def target_log_prob(
    logits: tf.Tensor,
    target: tf.Tensor,
    attn: tf.Tensor | None = None,
    p_gen_logit: tf.Tensor | None = None,
    enc_ext_ids: tf.Tensor | None = None,
    fused: bool = True,
) -> tf.Tensor:
    """log P(w*_t) of eq. 9 (or eq. 5 for the baseline when attn is None), for each step.

    Args:
      logits: float [batch, T, V] pre-softmax vocabulary scores.
      target: int32 [batch, T] extended-vocab ids.
      attn: float [batch, T, src_len]; p_gen_logit: float [batch, T]; enc_ext_ids: int32
        [batch, src_len]; fused: vocab_log_prob's.
    Returns: float32 [batch, T]. Finite for p_gen in {0, 1}, for targets absent from both
    distributions, and for empty articles (attn all zero).
    """
    log_p_vocab = vocab_log_prob(logits, target, fused)
    if attn is None:
        return log_p_vocab
    return mix_copy(log_p_vocab, target, attn, p_gen_logit, enc_ext_ids)
