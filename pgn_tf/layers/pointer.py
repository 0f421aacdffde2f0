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


def _dense_bincount_grad(op, grad):
    """The gradient of a weighted bincount with respect to its weights: d out[b, w] / d
    weights[b, i] = [ids[b, i] = w], so the upstream gradient is gathered at the ids."""
    ids, weights = op.inputs[0], op.inputs[2]
    if op.get_attr("binary_output") or weights.shape.num_elements() == 0:
        return None, None, None
    batch_dims = 1 if ids.shape.rank == 2 else 0
    return None, None, tf.cast(tf.gather(grad, ids, batch_dims=batch_dims), weights.dtype)


# TF registers no gradient for DenseBincount. It is registered here, once, rather than with
# tf.custom_gradient: a custom gradient is saved into the export, and tf.saved_model.load
# registers it in TF's process-wide gradient registry, which then keeps every loaded version's
# graphs alive (a server swapping versions grew ~120 MB a swap).
try:
    tf.RegisterGradient("DenseBincount")(_dense_bincount_grad)
except KeyError:  # registered already (a TF that has one, or this module loaded twice)
    pass


def scatter_copy(attn: tf.Tensor, enc_ext_ids: tf.Tensor, ext_size) -> tf.Tensor:
    """sum_{i: w_i = w} a_i for every w of the extended vocab.

    attn: float [batch, src_len]; enc_ext_ids: int32 [batch, src_len] -> float [batch, ext_size].
    A weighted bincount per row (duplicates add up): on CPU it runs in about half the time of
    the equivalent scatter_nd of [B, L] updates (docs/performance.md); its gradient gathers
    (_dense_bincount_grad).
    """
    return tf.math.bincount(tf.cast(enc_ext_ids, tf.int32), weights=attn, minlength=ext_size,
                            maxlength=ext_size, axis=-1, dtype=attn.dtype)


def final_distribution(
    vocab_dist: tf.Tensor,
    attn: tf.Tensor,
    p_gen: tf.Tensor,
    enc_ext_ids: tf.Tensor,
    num_extra: tf.Tensor,
) -> tf.Tensor:
    """Eq. 9 over the extended vocabulary.

    Args:
      vocab_dist: float [batch, V]; attn: float [batch, src_len]; p_gen: float [batch, 1];
      enc_ext_ids: int32 [batch, src_len]; num_extra: scalar int, the OOV slots M.
    Returns: float [batch, V + M].
    """
    vocab_part = tf.pad(p_gen * vocab_dist, [[0, 0], [0, num_extra]])
    ext_size = tf.shape(vocab_dist)[1] + num_extra
    return vocab_part + scatter_copy((1.0 - p_gen) * attn, enc_ext_ids, ext_size)


class Mixture(NamedTuple):
    """A pointer model's next-token distribution in parts (See et al. 2017 eq. 9):
    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: ext_ids_i = w} attn_i, for a search that
    scores only the tokens that can rank among the best (`mixture_candidates` in
    pgn_tf.decoding.beam_search) instead of forming P over the whole extended vocabulary.

    probs float32 [N, V] (P_vocab); p_gen float32 [N]; attn float32 [N, L]; ext_ids int32
    [N, L] (extended ids of the source positions); slot int32 [N, L] and first bool [N, L]
    (`copy_slots`); width int32 scalar: V + the OOV slots (the dense distribution's width).
    """

    probs: tf.Tensor
    p_gen: tf.Tensor
    attn: tf.Tensor
    ext_ids: tf.Tensor
    slot: tf.Tensor
    first: tf.Tensor
    width: tf.Tensor


def copy_slots(ext_ids: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(slot int32 [B, L], first bool [B, L]) for source ids ext_ids int32 [B, L] and mask
    bool [B, L] (real tokens): slot[i] is the first real position holding position i's id (i
    itself for padding), first[i] that i is a real position and its id's first. Computed once
    an article, for `Mixture`: the copy probability of an id is its attention summed over the
    positions of one slot."""
    same = tf.equal(ext_ids[:, :, None], ext_ids[:, None, :]) & mask[:, None, :]  # [B, i, j]
    l_src = tf.shape(ext_ids)[1]
    slot = tf.where(mask, tf.argmax(tf.cast(same, tf.int32), axis=2, output_type=tf.int32),
                    tf.range(l_src)[None, :])
    return slot, mask & tf.equal(slot, tf.range(l_src)[None, :])


def dense_distribution(mix: Mixture) -> tf.Tensor:
    """log P over the whole extended vocabulary, float32 [N, W]: the dense form of a Mixture,
    as a pointer model's step returns it without `mixture` (for greedy search, sampling and
    the rescoring features, which read every column)."""
    probs = final_distribution(mix.probs, mix.attn, mix.p_gen[:, None], mix.ext_ids,
                               mix.width - tf.shape(mix.probs)[1])
    return tf.math.log(tf.maximum(probs, 1e-30))


@tf.custom_gradient
def _log_softmax_at(logits: tf.Tensor, target: tf.Tensor):
    """log softmax(logits)[target] of each row: logits float32 [N, V], target int32 [N] (< V).

    Its gradient is written out, g (onehot(target) - softmax(logits)), from the exponentials
    the forward pass computed: autodiff would differentiate the gather into a dense
    [N, V] segment sum and add it to the log-sum-exp's gradient, two more full-width passes
    (4.5-8 ms less a step at the reference sizes; docs/performance.md). Training only: no
    exported graph holds it (the note on DenseBincount's gradient above says why that
    matters)."""
    top = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
    exp = tf.exp(logits - top)
    total = tf.reduce_sum(exp, axis=-1)
    out = tf.gather(logits, target, batch_dims=1) - (tf.math.log(total) + top[:, 0])

    def grad(g):
        rows = tf.stack([tf.range(tf.shape(target)[0]), target], axis=1)
        return tf.tensor_scatter_nd_add(exp * (-g / total)[:, None], rows, g), None

    return out, grad


def vocab_log_prob(logits: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """log P_vocab(w*) (eq. 4) of each target: float32 [...] for logits float [..., V] and
    target int32 [...] (any leading shape, e.g. [batch, T] or the [N] real target positions):
    the target's logit minus the log-sum-exp of the logits, _NEG where the target is an
    extended-vocab id (>= V)."""
    logits = tf.cast(logits, tf.float32)
    v = tf.shape(logits)[-1]
    target = tf.cast(target, tf.int32)
    flat = _log_softmax_at(tf.reshape(logits, [-1, v]),
                           tf.reshape(tf.minimum(target, v - 1), [-1]))
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
) -> tf.Tensor:
    """log P(w*_t) of eq. 9 (or eq. 5 for the baseline when attn is None), for each step.

    Args:
      logits: float [batch, T, V] pre-softmax vocabulary scores.
      target: int32 [batch, T] extended-vocab ids.
      attn: float [batch, T, src_len]; p_gen_logit: float [batch, T]; enc_ext_ids: int32
        [batch, src_len].
    Returns: float32 [batch, T]. Finite for p_gen in {0, 1}, for targets absent from both
    distributions, and for empty articles (attn all zero).
    """
    log_p_vocab = vocab_log_prob(logits, target)
    if attn is None:
        return log_p_vocab
    return mix_copy(log_p_vocab, target, attn, p_gen_logit, enc_ext_ids)
