"""A pointer model's step distribution searched in parts (See et al. 2017 eq. 9): the
candidates of a `layers.pointer.Mixture` (P_vocab, p_gen, the attention and the source ids)
without forming its [b*K, W] extended-vocabulary distribution. Beam search hands a Mixture here
and a dense distribution to decoding.candidates; the result is the same."""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.decoding.candidates import merge_rows, row_top_k
from pgn_tf.decoding.constraints import NEG_INF, Constraints
from pgn_tf.layers.pointer import Mixture, mixture_columns, mixture_vocab, vocab_width


def mixture_candidates(mix: Mixture, constraints: Constraints, seq: tf.Tensor, step: tf.Tensor,
                       alive_logp: tf.Tensor, pool, chunk: int = 32):
    """`candidates.top_candidates` of a Mixture under `constraints`, without forming the
    [b*K, W] distribution: equal to `constraints.apply` and `top_candidates` on
    `pointer.dense_distribution(mix)` (up to the order of exactly equal scores and float
    rounding; tests/decoding/test_search.py). seq: int32 [b*K, T], the hypotheses' tokens so
    far; alive_logp: float [b, K]; returns (scores, beam, token), each [b, P].

    A token that is not in the article has P(w) = p_gen P_vocab(w), so the hypothesis' best
    such tokens are among the `pool` best of P_vocab (`row_top_k` over V columns, the banned
    ones pushed below every allowed one); every token of the article is a candidate with its
    full eq. 9 probability, the copy attention summed over its positions (a segment sum over
    L, at the first position of each id). Their log-probabilities, banned ones min(log p,
    -1e9) as `Constraints.apply` leaves them, go to `merge_rows`.

    A shortlisted Mixture (its `columns` and `position` set: pgn_tf.decoding.shortlist) has
    P_vocab over its C candidate columns: the bans and the article's ids are mapped to their
    columns, and the columns chosen back to vocabulary ids; a word without a column is never
    a candidate (its probability is 0), so a ban on it is moot. Its vocab_scale, if any,
    scales P_vocab (not the copy).
    """
    n, c, v = tf.shape(seq)[0], mixture_columns(mix), mixture_vocab(mix)
    ban_idx, ban_values = constraints.ban_entries(n, seq, step)
    l_src = tf.shape(mix.ext_ids)[1]
    col = ban_idx[:, 1]
    ban = ban_values <= NEG_INF / 2  # [U]
    in_vocab = col < v
    ban_col, in_cols = col, in_vocab
    if mix.position is not None:
        ban_col = tf.gather(mix.position, tf.minimum(col, v - 1))
        in_cols = in_vocab & (ban_col < c)
    # P_vocab with its banned columns at -1 (below every allowed probability).
    banned_probs = _softmax_banned_in_place(
        mix.logits, n, tf.boolean_mask(ban_idx[:, 0], ban & in_cols),
        tf.boolean_mask(ban_col, ban & in_cols), width=c)
    # Bans on the OOV slots (ids >= V): a [N, M + 1] marker (column 0 a dump for the rest).
    m = tf.maximum(mix.width - v, 0)
    oov_banned = tf.tensor_scatter_nd_max(
        tf.zeros([n, m + 1], tf.int32),
        tf.stack([ban_idx[:, 0], tf.where(~in_vocab, col - v + 1, 0)], 1),
        tf.cast(ban & ~in_vocab, tf.int32)) > 0

    p_gen = tf.cast(mix.p_gen, tf.float32)[:, None]
    p_gen_vocab = p_gen if mix.vocab_scale is None else p_gen * mix.vocab_scale[:, None]
    # The vocabulary's candidates, less those in the article (scored below with their copies).
    k_vocab = tf.minimum(pool, c)
    vocab_p, vocab_ids = row_top_k(banned_probs, k_vocab, chunk)  # [N, P]
    if mix.columns is not None:
        vocab_ids = tf.gather(mix.columns, vocab_ids)  # columns -> vocabulary ids
    ext_ids = tf.cast(mix.ext_ids, tf.int32)
    real = tf.reduce_any(tf.equal(vocab_ids[:, :, None], ext_ids[:, None, :])
                         & mix.first[:, None, :], axis=2)  # [N, P]: in the article
    vocab_logp = tf.where(vocab_p < 0, NEG_INF,
                          tf.math.log(tf.maximum(p_gen_vocab * vocab_p, 1e-30)))
    vocab_logp = tf.where(real, float("-inf"), vocab_logp)
    # The article's tokens: copy attention summed per id, at its first position.
    copy = tf.math.unsorted_segment_sum(
        (1.0 - p_gen) * tf.cast(mix.attn, tf.float32),
        tf.cast(mix.slot, tf.int32) + tf.range(n)[:, None] * l_src, n * l_src)
    copy = tf.reshape(copy, [n, l_src])
    # P_vocab read back from the banned copy: a banned id's -1 marks it banned, and its score
    # is then min(log p, -1e9) whatever p is.
    is_vocab = ext_ids < v
    src_col = tf.minimum(ext_ids, v - 1)
    if mix.position is not None:  # an article's words all have columns (shortlist)
        src_col = tf.gather(mix.position, src_col)
        is_vocab &= src_col < c
        src_col = tf.minimum(src_col, c - 1)
    at_src = tf.where(is_vocab, tf.gather(banned_probs, src_col, batch_dims=1), 0.0)
    gen = p_gen_vocab * tf.maximum(at_src, 0.0)
    src_banned = tf.where(
        is_vocab, at_src < 0,
        tf.gather(oov_banned, tf.clip_by_value(ext_ids - v + 1, 0, m), batch_dims=1))
    src_logp = tf.math.log(tf.maximum(gen + copy, 1e-30))
    src_logp = tf.where(src_banned, tf.minimum(src_logp, NEG_INF), src_logp)
    src_logp = tf.where(mix.first, src_logp, float("-inf"))

    cand_logp = tf.concat([vocab_logp, src_logp], 1)  # [N, P + L]
    cand_ids = tf.concat([vocab_ids, ext_ids], 1)
    row_scores, pos = tf.math.top_k(cand_logp, k=tf.minimum(pool, k_vocab + l_src))
    return merge_rows(row_scores, tf.gather(cand_ids, pos, batch_dims=1), alive_logp, pool)


def _softmax_banned_in_place(logits: tf.Tensor, n, rows: tf.Tensor, cols: tf.Tensor,
                             width=None):
    """softmax(logits) float32 [n, V] with the entries (rows[u], cols[u]) at -1, written into
    the softmax's own buffer: a search step's largest tensor, which a scatter would copy
    first (TensorFlow's CPU scatters never reuse their input's buffer). The rows and columns
    are the banned entries only, so every write is the same -1 and repeated entries cannot
    race.

    `InplaceUpdate` writes into its input whoever else holds it, so the softmax must be this
    function's alone. Its inputs' other readers are safe (the softmax reuses the logits'
    buffer only when nothing else holds it); a merge is not: TensorFlow's graph optimizer
    merges identical ops, and its common-subexpression pass knows nothing of in-place
    writes, so a softmax of the same logits elsewhere (the dense distribution's) would get
    the bans. The softmax therefore depends on the bans' indices: it can only merge with one
    that takes the same bans, whose writes are the same. Past 2**31 entries (the flat index
    is int32) it refuses with an error. width: V, where the caller knows it without reading
    the logits (default: vocab_width)."""
    v = vocab_width(logits) if width is None else width
    flat = rows * v + cols
    entries = tf.cast(n, tf.int64) * tf.cast(v, tf.int64)
    # Strings only: an Assert with other data runs in a cond, and a cond that grappler proves
    # but cannot prune (an Assert is stateful) has its loop optimizer log a C++ warning.
    check = tf.debugging.Assert(entries < 2**31, [
        "the search's hypotheses times the vocabulary must stay under 2**31, not",
        tf.strings.as_string(entries)])
    with tf.control_dependencies([flat, check]):
        probs = tf.nn.softmax(tf.cast(logits, tf.float32))
    banned = tf.raw_ops.InplaceUpdate(x=tf.reshape(probs, [-1]), i=flat,
                                      v=tf.fill(tf.shape(flat), tf.constant(-1.0, tf.float32)))
    return tf.reshape(banned, tf.stack([n, v]))
