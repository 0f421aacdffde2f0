"""Batched beam search in one tf.while_loop: every article x every beam advances together.

Written against the search interface (STYLE.md habit 5) and nothing else:
    step_fn(ids int32 [B*K], step int32, state) -> (log_probs float32 [B*K, W], state, extras)
where W is the (extended) vocabulary width and `state` any nest of [B*K, ...] tensors, reordered
as one unit by `reorder_state`. The search knows nothing about pointers or coverage.

Scores follow See et al. (2017): a finished hypothesis is ranked by its average log-probability
(length_penalty = 0), or by log p / ((5 + len) / 6)^alpha (GNMT) for length_penalty = alpha > 0.
The search ends when every article has K finished hypotheses (See et al.'s criterion) or at
max_steps; an article with none finished falls back to its best unfinished hypothesis.

Loop state (B articles, K beams, T = max_steps, L = source length):
    alive_seq      int32 [B, K, T]   tokens of live hypotheses (without [START])
    alive_logp     float [B, K]      their summed log-probabilities
    fin_seq        int32 [B, K, T]   finished hypotheses (ending in [STOP], which is stored)
    fin_score      float [B, K]      their normalised scores (-inf = empty slot)
    fin_len        int32 [B, K]
    model state    nest of [B*K, ...]
    alive_attn     float [B, K, T, L] and alive_pgen [B, K, T] (only with return_extras)
"""

from __future__ import annotations

import tensorflow as tf

NEG_INF = -1e9


def reorder_state(state, flat_indices: tf.Tensor):
    """Gathers every per-hypothesis tensor of a nested state (OpenNMT-tf `_reorder_state`)."""
    return tf.nest.map_structure(lambda t: tf.gather(t, flat_indices), state)


SHARED = "shared"  # a dict key whose tensors are the same for every hypothesis: never tiled


def tile_beams(nest, beam_size):
    """[B, ...] -> [B*K, ...] for every tensor of rank >= 1 (each row repeated K times), except
    under a dict key "shared" (per-batch tensors such as a tied output matrix)."""

    def tile(t):
        if t.shape.rank == 0:
            return t
        return tf.repeat(t, beam_size, axis=0)

    if isinstance(nest, dict) and SHARED in nest:
        rest = {k: v for k, v in nest.items() if k != SHARED}
        return dict(tf.nest.map_structure(tile, rest), **{SHARED: nest[SHARED]})
    return tf.nest.map_structure(tile, nest)


def keep_shapes(body):
    """Wraps a while_loop body so its outputs keep the static shapes of its inputs (a gather by
    dynamic indices loses them; a beam size that is a graph constant would then not match)."""

    def wrapped(*args):
        out = body(*args)
        return tf.nest.map_structure(lambda new, old: tf.ensure_shape(new, old.shape), out, args)

    return wrapped


def length_norm(length: tf.Tensor, alpha: float) -> tf.Tensor:
    length = tf.cast(length, tf.float32)
    if alpha and alpha > 0:
        return tf.pow((5.0 + length) / 6.0, alpha)
    return tf.maximum(length, 1.0)


def constrain(
    log_probs: tf.Tensor,
    seq: tf.Tensor,
    step: tf.Tensor,
    stop_id: int,
    min_steps,
    unk_id: int | None = None,
    block_trigrams: bool = False,
) -> tf.Tensor:
    """Decoding constraints shared by beam, greedy and sampling search.

    log_probs: float [N, W]; seq: int32 [N, T] tokens so far (positions < step are valid).
    - before min_steps, [STOP] is impossible;
    - unk_id: [UNK] is never emitted (there is always an alternative);
    - block_trigrams (Paulus et al. 2017): a token that would repeat a trigram already in the
      hypothesis gets probability 0.
    """
    width = tf.shape(log_probs)[1]
    n = tf.shape(log_probs)[0]
    vocab_ids = tf.range(width)[None, :]
    banned = tf.zeros_like(log_probs, dtype=tf.bool)
    banned |= tf.logical_and(tf.equal(vocab_ids, stop_id), step < min_steps)
    if unk_id is not None:
        banned |= tf.equal(vocab_ids, unk_id)
    if block_trigrams:
        t = tf.shape(seq)[1]
        last2 = tf.gather(seq, tf.maximum(step - 2, 0), axis=1)  # [N]
        last1 = tf.gather(seq, tf.maximum(step - 1, 0), axis=1)
        j = tf.range(t - 2)  # a trigram (seq[j], seq[j+1], seq[j+2]) fully emitted: j + 2 < step
        match = (
            tf.equal(seq[:, :-2], last2[:, None])
            & tf.equal(seq[:, 1:-1], last1[:, None])
            & (j[None, :] + 2 < step)
            & (step >= 2)
        )  # [N, T-2]
        rows = tf.broadcast_to(tf.range(n)[:, None], tf.shape(match))
        idx = tf.stack([tf.boolean_mask(rows, match), tf.boolean_mask(seq[:, 2:], match)], axis=1)
        hits = tf.scatter_nd(idx, tf.ones([tf.shape(idx)[0]], tf.int32), tf.shape(log_probs))
        banned |= hits > 0
    return tf.where(banned, tf.constant(NEG_INF, log_probs.dtype), log_probs)


def beam_search(
    step_fn,
    initial_state,
    batch_size,
    beam_size,
    max_steps,
    start_id: int,
    stop_id: int,
    min_steps=0,
    length_penalty: float = 0.0,
    block_trigrams: bool = False,
    unk_id: int | None = None,
    return_extras: bool = False,
    src_len=None,
):
    """Runs the search.

    Args:
      step_fn: the search interface (module docstring).
      initial_state: nest of [B*K, ...] tensors (already tiled with `tile_beams`).
      batch_size B, beam_size K, max_steps T, min_steps: ints or int32 scalars.
      unk_id: if set, [UNK] is never emitted. block_trigrams: Paulus et al.'s trigram blocking.
      return_extras: also return the best hypothesis' attention [B, T, src_len] and p_gen [B, T]
        (step_fn's extras "attn" and "p_gen"); needs src_len.

    Returns dict:
      ids int32 [B, T] best hypothesis (padded with 0 after its end, [STOP] excluded),
      length int32 [B] (tokens before [STOP]), score float32 [B] (normalised log-prob),
      and with return_extras: attn float32 [B, T, L], p_gen float32 [B, T].
    """
    B, K, T = batch_size, beam_size, max_steps
    BK = B * K
    alive_seq = tf.zeros([B, K, T], tf.int32)
    # Only the first beam is live at step 0, so the K beams do not start as K copies.
    alive_logp = tf.tile(
        tf.concat([[0.0], tf.fill([K - 1], NEG_INF)], 0)[None, :], [B, 1]
    )
    fin_seq = tf.zeros([B, K, T], tf.int32)
    fin_score = tf.fill([B, K], NEG_INF)
    fin_len = tf.zeros([B, K], tf.int32)
    ids = tf.fill([BK], start_id)
    extras0 = {}
    if return_extras:
        extras0 = {
            "alive_attn": tf.zeros([B, K, T, src_len]),
            "alive_pgen": tf.zeros([B, K, T]),
            "fin_attn": tf.zeros([B, K, T, src_len]),
            "fin_pgen": tf.zeros([B, K, T]),
        }

    def cond(step, ids, alive_seq, alive_logp, fin_seq, fin_score, fin_len, state, ex):
        all_full = tf.reduce_all(fin_score[:, -1] > NEG_INF / 2)  # K finished everywhere
        return tf.logical_and(step < T, tf.logical_not(all_full))

    def body(step, ids, alive_seq, alive_logp, fin_seq, fin_score, fin_len, state, ex):
        log_probs, state, step_extras = step_fn(ids, step, state)  # [BK, W]
        log_probs = constrain(
            tf.cast(log_probs, tf.float32), tf.reshape(alive_seq, [BK, T]), step, stop_id,
            min_steps, unk_id, block_trigrams,
        )
        width = tf.shape(log_probs)[1]
        scores = alive_logp[:, :, None] + tf.reshape(log_probs, [B, K, width])
        flat = tf.reshape(scores, [B, K * width])
        top_scores, top_idx = tf.math.top_k(flat, k=2 * K)  # [B, 2K]
        beam_idx = top_idx // width
        token = top_idx % width
        batch_off = tf.range(B)[:, None] * K
        cand_seq = tf.gather(alive_seq, beam_idx, batch_dims=1)  # [B, 2K, T]
        cand_seq = tf.where(
            tf.equal(tf.range(T), step)[None, None, :], token[:, :, None], cand_seq
        )
        is_stop = tf.equal(token, stop_id)
        valid = top_scores > NEG_INF / 2

        # Live hypotheses: the best K candidates that did not stop.
        live_scores = tf.where(is_stop | ~valid, NEG_INF * 2, top_scores)
        new_logp, live_pos = tf.math.top_k(live_scores, k=K)  # [B, K]
        new_seq = tf.gather(cand_seq, live_pos, batch_dims=1)
        parent = tf.gather(beam_idx, live_pos, batch_dims=1)  # [B, K]
        flat_parent = tf.reshape(parent + batch_off, [BK])
        state = reorder_state(state, flat_parent)
        new_ids = tf.reshape(tf.gather(token, live_pos, batch_dims=1), [BK])
        new_logp = tf.maximum(new_logp, NEG_INF)

        # Finished hypotheses: merge the stopped candidates into the K best so far.
        # As in See et al.'s code, a stopped candidate counts only if it ranks above the K-th
        # live one (so beam 1 is exactly greedy search).
        live_before = tf.cumsum(tf.cast(~is_stop, tf.int32), axis=1, exclusive=True)
        accepted = is_stop & valid & (live_before < K)
        stop_norm = top_scores / length_norm(step + 1, length_penalty)
        stop_scores = tf.where(accepted, stop_norm, NEG_INF)
        all_scores = tf.concat([fin_score, stop_scores], axis=1)  # [B, 3K]
        all_seq = tf.concat([fin_seq, cand_seq], axis=1)
        all_len = tf.concat([fin_len, tf.fill([B, 2 * K], step)], axis=1)
        fin_score, fin_pos = tf.math.top_k(all_scores, k=K)
        fin_seq = tf.gather(all_seq, fin_pos, batch_dims=1)
        fin_len = tf.gather(all_len, fin_pos, batch_dims=1)

        if return_extras:
            here = tf.equal(tf.range(T), step)  # [T]
            # float32 buffers whatever the model computes in (bf16 under mixed precision)
            attn = tf.reshape(tf.cast(step_extras["attn"], tf.float32), [B, K, -1])
            pgen = tf.reshape(tf.cast(step_extras["p_gen"], tf.float32), [B, K])
            cand_attn = tf.gather(ex["alive_attn"], beam_idx, batch_dims=1)  # [B, 2K, T, L]
            cand_attn = tf.where(
                here[None, None, :, None],
                tf.gather(attn, beam_idx, batch_dims=1)[:, :, None, :],
                cand_attn,
            )
            cand_pgen = tf.where(
                here[None, None, :],
                tf.gather(pgen, beam_idx, batch_dims=1)[:, :, None],
                tf.gather(ex["alive_pgen"], beam_idx, batch_dims=1),
            )
            ex = {
                "alive_attn": tf.gather(cand_attn, live_pos, batch_dims=1),
                "alive_pgen": tf.gather(cand_pgen, live_pos, batch_dims=1),
                "fin_attn": tf.gather(tf.concat([ex["fin_attn"], cand_attn], 1), fin_pos,
                                      batch_dims=1),
                "fin_pgen": tf.gather(tf.concat([ex["fin_pgen"], cand_pgen], 1), fin_pos,
                                      batch_dims=1),
            }
        return step + 1, new_ids, new_seq, new_logp, fin_seq, fin_score, fin_len, state, ex

    loop_vars = (tf.constant(0), ids, alive_seq, alive_logp, fin_seq, fin_score, fin_len,
                 initial_state, extras0)
    step, _, alive_seq, alive_logp, fin_seq, fin_score, fin_len, _, ex = tf.while_loop(
        cond, keep_shapes(body), loop_vars
    )

    # An article with no finished hypothesis keeps its best live one (scored at its length).
    has_fin = fin_score[:, 0] > NEG_INF / 2  # [B]
    alive_norm = alive_logp[:, 0] / length_norm(step, length_penalty)
    best_seq = tf.where(has_fin[:, None], fin_seq[:, 0], alive_seq[:, 0])  # [B, T]
    length = tf.where(has_fin, fin_len[:, 0], step)  # fin_len = index of [STOP] = tokens before it
    score = tf.where(has_fin, fin_score[:, 0], alive_norm)
    keep = tf.range(T)[None, :] < length[:, None]
    result = {"ids": tf.where(keep, best_seq, 0), "length": length, "score": score}
    if return_extras:
        attn = tf.where(has_fin[:, None, None], ex["fin_attn"][:, 0], ex["alive_attn"][:, 0])
        pgen = tf.where(has_fin[:, None], ex["fin_pgen"][:, 0], ex["alive_pgen"][:, 0])
        result["attn"] = attn * tf.cast(keep, tf.float32)[:, :, None]
        result["p_gen"] = pgen * tf.cast(keep, tf.float32)
    return result
