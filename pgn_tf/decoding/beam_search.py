"""Batched beam search in one tf.while_loop: every article x every beam advances together, and
each article stops at its own K finished hypotheses.

Written against the one interface every search shares (docs/design.md) and nothing else:
    step_fn(ids int32 [N], step int32, state) -> (log_probs float32 [N, W], state, extras)
where N = b*K rows (b articles still decoding, K beams each), W the (extended) vocabulary width
and `state` any nest of [N, ...] tensors. A pointer model may return its distribution in parts
instead, a `Mixture` (P_vocab, p_gen, the attention and the source ids): the search then scores
only the tokens that can rank among the best (`mixture_candidates`: the vocabulary's best and
the article's own), never forming the [N, W] log-probabilities; the result is the same.
Two dict keys of the state are special:
  ARTICLE ("per_article"): tensors that are the same for the K beams of an article (the tiled
    encoder outputs, masks, extended ids). Beam reordering leaves them alone; they are gathered
    only when finished articles leave the batch.
  SHARED ("shared"): per-batch tensors (a tied output matrix), never tiled nor gathered.
The search knows nothing about pointers or coverage; it reads the extras "attn" float [N, L]
(GNMT coverage penalty, `return_extras`) and "p_gen" float [N] (`return_extras`) only.

Semantics: See et al.'s released beam search (abisee/pointer-generator `beam_search.py`), per
article:
  - each step, the K live hypotheses of an article are extended by every token and the best 2K
    candidates are ranked by summed log-probability; a candidate ending in [STOP] joins the
    article's finished results if it ranks above the K-th live one and the step is at least
    min_steps ([STOP] is impossible before that); the best K others stay live;
  - the article stops when it has K finished results or after max_steps steps, independently
    of its batch-mates: its result does not depend on the batch it is decoded in
    (tests/decoding/test_search.py decodes articles alone and among others);
  - results are ranked by the average log-probability over len(tokens), counting [START] and
    [STOP] as See et al.'s `avg_log_prob` does: a summary of n words ending in [STOP] is divided
    by n + 2, a live hypothesis of n words (the fallback of an article with no finished one) by
    n + 1. length_penalty = alpha > 0 ranks by log p / ((5 + |Y|) / 6)^alpha instead (Wu et al.
    2016, GNMT), |Y| the emitted tokens with [STOP];
  - coverage_penalty = beta > 0 adds GNMT's cp = beta * sum_i log(min(sum_t a_t,i, 1)) to that
    score (Wu et al. 2016 eq. 14); the attention sum of each hypothesis is carried in the loop
    and follows its beam. Source positions never attended (padding) are left out of the sum.
  - recombine_window = C > 0 merges hypotheses whose last C ids are equal, keeping the better
    (Rush et al. 2015 section 5: exact for a model whose state is its last C ids, as ABS's
    NNLM; with it the candidate pool grows from 2K to K^2, which always holds the K best
    distinct windows).
With these rules beam 1 is exactly greedy search and a wide beam finds the exhaustive optimum
(both tested).

Speed: step 0 runs on one row an article (the K beams start as copies of one state and
[START]; `first_step`), the later steps on the b*K hypotheses. Finished articles leave the
batch. When the live articles fall to `compact_below` of
the rows being decoded, every per-article and per-hypothesis tensor is gathered down to them
(the loop's batch dimension is dynamic); a finished article's result is written into [B, ...]
output buffers at its original index the step it finishes.

Loop state (b live articles, K beams, T = max_steps, L = source length, P = candidate pool):
    step         int32 []
    orig         int32 [b]          original index of each live article
    done         bool [b]           finished (result written), not yet compacted away
    ids          int32 [b*K]        last token of each hypothesis
    alive_seq    int32 [b, K, T]    tokens of live hypotheses (without [START])
    alive_logp   float [b, K]       their summed log-probabilities (-1e9 = empty slot)
    fin_seq      int32 [b, K, T]    finished hypotheses ([STOP] stored at fin_len)
    fin_score    float [b, K]       their normalised scores (-1e9 = empty slot)
    fin_len      int32 [b, K]       tokens before [STOP]
    state        nest of [b*K, ...] (ARTICLE part [b*K, ...] too)
    alive_cov    float [b, K, L]    attention sums (coverage_penalty > 0 only)
    alive_<x>, fin_<x>              extras of the hypotheses: attn [b, K, T, L], p_gen [b, K, T],
                                    src_pos int32 [b, K, T] (argmax of attn)
    out          dict of [B, ...]   results: ids [B, T], length [B], score [B], extras
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.layers.pointer import Mixture

NEG_INF = -1e9
_NO_BAN = 3e38  # a column update value that leaves a log-probability as it is (min(x, 3e38))

SHARED = "shared"  # a dict key whose tensors are the same for every hypothesis: never tiled
ARTICLE = "per_article"  # a dict key whose tensors are the same for an article's K beams

EXTRAS = ("attn", "p_gen", "src_pos")


def map_state(state, on_hyp, on_article, on_other=None):
    """Applies on_hyp to every per-hypothesis tensor of a nest, on_article to those under an
    ARTICLE key and on_other (default: identity) to SHARED tensors and scalars."""
    on_other = on_other or (lambda t: t)

    def walk(x, in_article, shared):
        if isinstance(x, dict):
            return {k: walk(v, in_article or k == ARTICLE, shared or k == SHARED)
                    for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, in_article, shared) for v in x)
        if shared or x.shape.rank == 0:
            return on_other(x)
        return on_article(x) if in_article else on_hyp(x)

    return walk(state, False, False)


def reorder_state(state, flat_indices: tf.Tensor):
    """Gathers every per-hypothesis tensor of a nested state (OpenNMT-tf `_reorder_state`);
    per-article (ARTICLE) tensors are the same for an article's beams and stay as they are."""
    return map_state(state, lambda t: tf.gather(t, flat_indices), lambda t: t)


def tile_beams(nest, beam_size):
    """[B, ...] -> [B*K, ...] for every tensor of rank >= 1 (each row repeated K times), except
    under a dict key "shared" (per-batch tensors such as a tied output matrix)."""

    def tile(t):
        return tf.repeat(t, beam_size, axis=0)

    return map_state(nest, tile, tile)


def keep_shapes(body):
    """Wraps a while_loop body so its outputs keep the static shapes of its inputs (a gather by
    dynamic indices loses them; a beam size that is a graph constant would then not match)."""

    def wrapped(*args):
        out = body(*args)
        return tf.nest.map_structure(lambda new, old: tf.ensure_shape(new, old.shape), out, args)

    return wrapped


def length_norm(emitted: tf.Tensor, alpha: float) -> tf.Tensor:
    """The divisor of a hypothesis' log-probability. emitted: tokens after [START] ([STOP]
    included when finished). alpha = 0: len(tokens) with [START], as See et al.'s avg_log_prob;
    alpha > 0: GNMT's ((5 + |Y|) / 6)^alpha."""
    emitted = tf.cast(emitted, tf.float32)
    if alpha and alpha > 0:
        return tf.pow((5.0 + emitted) / 6.0, alpha)
    return emitted + 1.0


def gnmt_coverage_penalty(attn_sum: tf.Tensor, beta: float) -> tf.Tensor:
    """Wu et al. (2016) eq. 14: beta * sum_i log(min(sum_t a_t,i, 1)). attn_sum: float
    [..., L] -> [...]; positions with a zero sum (padding) contribute 0."""
    logs = tf.math.log(tf.minimum(tf.maximum(attn_sum, 1e-30), 1.0))
    return beta * tf.reduce_sum(tf.where(attn_sum > 0, logs, 0.0), axis=-1)


def ban_entries(
    n,
    seq: tf.Tensor,
    step: tf.Tensor,
    stop_id: int,
    min_steps,
    unk_id: int | None = None,
    block_trigrams: bool = False,
    repeat_exempt: tf.Tensor | None = None,
    dtype=tf.float32,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decoding constraints shared by beam, greedy and sampling search, as column updates:
    (idx int32 [U, 2] of (row, column), values [U]), each value NEG_INF (banned) or _NO_BAN
    (left as it is), at most n * (2 + 2T) of them, never a full-width mask.

    n rows; seq: int32 [n, T] tokens so far (positions < step are valid).
    - before min_steps, [STOP] is impossible;
    - unk_id: [UNK] is never emitted (there is always an alternative);
    - block_trigrams (Paulus et al. 2017): a token that would repeat a trigram already in the
      hypothesis gets probability 0;
    - repeat_exempt: bool [V] (V <= W; ids >= V count as words): a hypothesis may not emit a
      token it already emitted unless exempt (the repeated-word block; inference.py builds it
      from the vocabulary).
    """
    t = tf.shape(seq)[1]
    neg = tf.constant(NEG_INF, dtype)
    keep = tf.constant(_NO_BAN, dtype)
    rows = tf.range(n)
    per_row = tf.ones_like(rows)
    # (rows, cols, values) blocks, each [N * m]
    blocks = [(rows, stop_id * per_row, tf.fill([n], tf.where(step < min_steps, neg, keep)))]
    if unk_id is not None:
        blocks.append((rows, unk_id * per_row, tf.fill([n], neg)))
    if block_trigrams:
        last2 = tf.gather(seq, tf.maximum(step - 2, 0), axis=1)  # [N]
        last1 = tf.gather(seq, tf.maximum(step - 1, 0), axis=1)
        j = tf.range(t - 2)  # a trigram (seq[j], seq[j+1], seq[j+2]) fully emitted: j + 2 < step
        match = (
            tf.equal(seq[:, :-2], last2[:, None])
            & tf.equal(seq[:, 1:-1], last1[:, None])
            & (j[None, :] + 2 < step)
            & (step >= 2)
        )  # [N, T-2]
        blocks.append((tf.repeat(rows, t - 2), tf.reshape(seq[:, 2:], [-1]),
                       tf.reshape(tf.where(match, neg, keep), [-1])))
    if repeat_exempt is not None:
        exempt = tf.convert_to_tensor(repeat_exempt, tf.bool)
        v = tf.shape(exempt)[0]
        is_exempt = tf.gather(exempt, tf.minimum(seq, v - 1)) & (seq < v)  # [N, T]
        emitted = tf.range(t)[None, :] < step
        blocks.append((tf.repeat(rows, t), tf.reshape(seq, [-1]),
                       tf.reshape(tf.where(emitted & ~is_exempt, neg, keep), [-1])))
    idx = tf.stack([tf.concat([b[0] for b in blocks], 0), tf.concat([b[1] for b in blocks], 0)],
                   axis=1)  # [U, 2]
    return idx, tf.concat([b[2] for b in blocks], 0)


def constrain(log_probs: tf.Tensor, seq: tf.Tensor, step: tf.Tensor, *args, **kwargs) -> tf.Tensor:
    """`ban_entries`' constraints applied to log_probs float [N, W] (the rest of the arguments
    are ban_entries' after n: stop_id, min_steps, unk_id, block_trigrams, repeat_exempt):
    banned entries become min(log p, -1e9), by one scatter of the column updates."""
    idx, values = ban_entries(tf.shape(log_probs)[0], seq, step, *args,
                              dtype=log_probs.dtype, **kwargs)
    return tf.tensor_scatter_nd_min(log_probs, idx, values)


def _row_top_k(x: tf.Tensor, k, chunk: int = 32):
    """(values, columns) of the k largest entries of each row of x float [N, W], best first,
    k <= W: the k best lie among the k chunks of `chunk` columns with the highest maxima (a
    chunk's maximum bounds its members), so one full-width pass (the chunks' maxima) and a
    top_k over k * chunk columns replace a top_k over W."""
    n, width = tf.shape(x)[0], tf.shape(x)[1]
    chunks = (width + chunk - 1) // chunk
    padded = tf.cond(tf.equal(width % chunk, 0), lambda: x,
                     lambda: tf.pad(x, [[0, 0], [0, chunks * chunk - width]],
                                    constant_values=float("-inf")))
    blocks = tf.reshape(padded, [n, chunks, chunk])
    _, best_chunks = tf.math.top_k(tf.reduce_max(blocks, axis=2),
                                   k=tf.minimum(k, chunks))  # [N, C']
    picked = tf.reshape(tf.gather(blocks, best_chunks, batch_dims=1), [n, -1])  # [N, C' * c]
    values, pos = tf.math.top_k(picked, k=k)
    return values, tf.gather(best_chunks, pos // chunk, batch_dims=1) * chunk + pos % chunk


def _merge_rows(row_scores, row_tokens, alive_logp, pool):
    """The `pool` best (hypothesis, token) of each article from each hypothesis' own best:
    row_scores float [b*K, R] (log-probs, best first), row_tokens int32 [b*K, R]."""
    b, k = tf.shape(alive_logp)[0], tf.shape(alive_logp)[1]
    per_row = tf.shape(row_scores)[1]
    sums = tf.reshape(tf.reshape(row_scores, [b, k, per_row]) + alive_logp[:, :, None],
                      [b, k * per_row])
    scores, idx = tf.math.top_k(sums, k=tf.minimum(pool, k * per_row))  # [b, P]
    beam = idx // per_row
    token = tf.gather(tf.reshape(row_tokens, [b, k * per_row]), idx, batch_dims=1)
    return scores, beam, token


def top_candidates(log_probs: tf.Tensor, alive_logp: tf.Tensor, pool, chunk: int = 32):
    """The `pool` best candidates (hypothesis, token) of each article by summed log-prob.

    log_probs: float [b*K, W]; alive_logp: float [b, K]. Returns (scores float [b, P], beam
    int32 [b, P], token int32 [b, P]), best first, P = min(pool, K * min(pool, W)).

    Equal to top_k over the [b, K * W] sums (up to the order of exactly equal scores), with less
    work: a hypothesis' own P best tokens are found by `_row_top_k`, and alive_logp, the same
    for a whole row, is added to those P only.
    """
    row_scores, row_tokens = _row_top_k(
        log_probs, tf.minimum(pool, tf.shape(log_probs)[1]), chunk)
    return _merge_rows(row_scores, row_tokens, alive_logp, pool)


def mixture_candidates(mix: Mixture, ban_idx: tf.Tensor, ban_values: tf.Tensor, alive_logp,
                       pool, chunk: int = 32):
    """`top_candidates` of a Mixture with the constraints `ban_entries`, without forming the
    [b*K, W] distribution: equal to constraining and searching
    `pointer.dense_distribution(mix)` (up to the order of exactly equal scores and float
    rounding; tests/decoding/test_search.py).

    A token that is not in the article has P(w) = p_gen P_vocab(w), so the hypothesis' best
    such tokens are among the `pool` best of P_vocab (`_row_top_k` over V columns, the banned
    ones pushed below every allowed one); every token of the article is a candidate with its
    full eq. 9 probability, the copy attention summed over its positions (a segment sum over
    L, at the first position of each id). Their log-probabilities, banned ones min(log p,
    -1e9) as `constrain` leaves them, go to `_merge_rows`.
    """
    probs = tf.cast(mix.probs, tf.float32)
    n, v = tf.shape(probs)[0], tf.shape(probs)[1]
    l_src = tf.shape(mix.ext_ids)[1]
    banned_value = tf.constant(-1.0, probs.dtype)
    col = ban_idx[:, 1]
    ban = ban_values <= NEG_INF / 2  # [U]
    # Bans on vocabulary columns: a probability of -1 (below every allowed one).
    in_vocab = col < v
    # (TF's scatter copies its input: skipped at the steps that ban nothing, as before
    # min_steps = 0 and without the [UNK], trigram and repeated-word blocks.)
    banned_probs = tf.cond(
        tf.reduce_any(ban & in_vocab),
        lambda: tf.tensor_scatter_nd_min(
            probs, tf.stack([ban_idx[:, 0], tf.where(in_vocab, col, 0)], 1),
            tf.where(ban & in_vocab, banned_value, tf.constant(_NO_BAN, probs.dtype))),
        lambda: probs)
    # Bans on the OOV slots (ids >= V): a [N, M + 1] marker (column 0 a dump for the rest).
    m = tf.maximum(mix.width - v, 0)
    oov_banned = tf.tensor_scatter_nd_max(
        tf.zeros([n, m + 1], tf.int32),
        tf.stack([ban_idx[:, 0], tf.where(~in_vocab, col - v + 1, 0)], 1),
        tf.cast(ban & ~in_vocab, tf.int32)) > 0

    p_gen = tf.cast(mix.p_gen, tf.float32)[:, None]
    # The vocabulary's candidates, less those in the article (scored below with their copies).
    k_vocab = tf.minimum(pool, v)
    vocab_p, vocab_ids = _row_top_k(banned_probs, k_vocab, chunk)  # [N, P]
    ext_ids = tf.cast(mix.ext_ids, tf.int32)
    real = tf.reduce_any(tf.equal(vocab_ids[:, :, None], ext_ids[:, None, :])
                         & mix.first[:, None, :], axis=2)  # [N, P]: in the article
    vocab_logp = tf.where(vocab_p < 0, NEG_INF, tf.math.log(tf.maximum(p_gen * vocab_p, 1e-30)))
    vocab_logp = tf.where(real, float("-inf"), vocab_logp)
    # The article's tokens: copy attention summed per id, at its first position.
    copy = tf.math.unsorted_segment_sum(
        (1.0 - p_gen) * tf.cast(mix.attn, tf.float32),
        tf.cast(mix.slot, tf.int32) + tf.range(n)[:, None] * l_src, n * l_src)
    copy = tf.reshape(copy, [n, l_src])
    # P_vocab read back from the banned copy: a banned id's -1 marks it banned, and its score
    # is then min(log p, -1e9) whatever p is.
    is_vocab = ext_ids < v
    at_src = tf.where(is_vocab, tf.gather(banned_probs, tf.minimum(ext_ids, v - 1), batch_dims=1),
                      0.0)
    gen = p_gen * tf.maximum(at_src, 0.0)
    src_banned = tf.where(
        is_vocab, at_src < 0,
        tf.gather(oov_banned, tf.clip_by_value(ext_ids - v + 1, 0, m), batch_dims=1))
    src_logp = tf.math.log(tf.maximum(gen + copy, 1e-30))
    src_logp = tf.where(src_banned, tf.minimum(src_logp, NEG_INF), src_logp)
    src_logp = tf.where(mix.first, src_logp, float("-inf"))

    cand_logp = tf.concat([vocab_logp, src_logp], 1)  # [N, P + L]
    cand_ids = tf.concat([vocab_ids, ext_ids], 1)
    row_scores, pos = tf.math.top_k(cand_logp, k=tf.minimum(pool, k_vocab + l_src))
    return _merge_rows(row_scores, tf.gather(cand_ids, pos, batch_dims=1), alive_logp, pool)


def _recombined(cand_seq, is_stop, valid, step, window: int):
    """bool [b, P]: live candidate j is merged into a better live candidate i < j (top_k order)
    whose last `window` ids are the same (Rush et al. 2015, hypothesis recombination)."""
    pos = step - window + 1 + tf.range(window)  # the window's positions, [C]
    last = tf.gather(cand_seq, tf.maximum(pos, 0), axis=2)  # [b, P, C]
    same = tf.reduce_all(
        tf.equal(last[:, :, None, :], last[:, None, :, :]) | (pos < 0), axis=-1
    )  # [b, P, P]; positions before the first token are [START] for every hypothesis
    p = tf.shape(cand_seq)[1]
    earlier = tf.range(p)[:, None] < tf.range(p)[None, :]  # i < j
    live = valid & ~is_stop
    return tf.reduce_any(same & earlier[None] & live[:, :, None], axis=1) & live


def _wanted_extras(return_extras) -> tuple[str, ...]:
    if return_extras is True:
        return ("attn", "p_gen")
    if not return_extras:
        return ()
    unknown = set(return_extras) - set(EXTRAS)
    if unknown:
        raise ValueError(f"return_extras: unknown {sorted(unknown)}, choose from {EXTRAS}")
    return tuple(return_extras)


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
    return_extras=False,
    src_len=None,
    coverage_penalty: float = 0.0,
    repeat_exempt=None,
    recombine_window: int = 0,
    compact_below: float = 1.0,
):
    """Runs the search (semantics in the module docstring).

    Args:
      step_fn: the search interface (module docstring).
      initial_state: nest of [B*K, ...] tensors (already tiled with `tile_beams`).
      batch_size B, beam_size K, max_steps T, min_steps: ints or int32 scalars.
      length_penalty: 0 = average log-prob (See et al.), alpha > 0 = GNMT's.
      block_trigrams: Paulus et al.'s trigram blocking. unk_id: if set, [UNK] is never emitted.
      return_extras: True (= ("attn", "p_gen")) or a tuple of "attn", "p_gen", "src_pos": the
        best hypothesis' attention [B, T, L], p_gen [B, T], argmax of the attention int32
        [B, T] (step_fn's extras "attn" [N, L] and "p_gen" [N]); "attn" needs src_len.
      coverage_penalty: GNMT's beta (0 = off); needs src_len and the extra "attn".
      repeat_exempt: bool [V] or None: the repeated-word block (`constrain`).
      recombine_window: C > 0 merges hypotheses with the same last C ids (0 = off).
      compact_below: finished articles leave the batch once the live ones are at most this
        share of the rows decoded (1.0: at every step where one finishes; 0: never).

    Returns dict:
      ids int32 [B, T] best hypothesis (padded with 0 after its end, [STOP] excluded),
      length int32 [B] (tokens before [STOP]), score float32 [B] (its ranking score),
      and the requested extras (zero after the end).
    """
    B, K, T = batch_size, beam_size, max_steps
    extras = _wanted_extras(return_extras)
    beta = float(coverage_penalty or 0.0)
    if ("attn" in extras or beta > 0) and src_len is None:
        raise ValueError("beam_search: src_len is needed for the attention extras and the "
                         "coverage penalty")
    pool = 2 * K
    if recombine_window:
        pool = tf.maximum(pool, K * K)

    alive_logp = tf.tile(tf.concat([[0.0], tf.fill([K - 1], NEG_INF)], 0)[None, :], [B, 1])
    # Only the first beam is live at step 0, so the K beams do not start as K copies.
    ex = {}
    out = {"ids": tf.zeros([B, T], tf.int32), "length": tf.zeros([B], tf.int32),
           "score": tf.zeros([B])}
    for x in extras:
        tail = [src_len] if x == "attn" else []
        dtype = tf.int32 if x == "src_pos" else tf.float32
        ex[f"alive_{x}"] = tf.zeros([B, K, T] + tail, dtype)
        ex[f"fin_{x}"] = tf.zeros([B, K, T] + tail, dtype)
        out[x] = tf.zeros([B, T] + tail, dtype)
    if beta > 0:
        ex["alive_cov"] = tf.zeros([B, K, src_len])
    lv = {
        "step": tf.constant(0),
        "orig": tf.range(B),
        "done": tf.zeros([B], tf.bool),
        "ids": tf.fill([B * K], start_id),
        "alive_seq": tf.zeros([B, K, T], tf.int32),
        "alive_logp": alive_logp,
        "fin_seq": tf.zeros([B, K, T], tf.int32),
        "fin_score": tf.fill([B, K], NEG_INF),
        "fin_len": tf.zeros([B, K], tf.int32),
        "state": initial_state,
        "ex": ex,
        "out": out,
    }
    article_keys = ("orig", "done", "alive_seq", "alive_logp", "fin_seq", "fin_score",
                    "fin_len", "ex")

    def cond(lv):
        return tf.logical_and(lv["step"] < T, tf.reduce_any(~lv["done"]))

    def advance(lv, k_in, first: bool = False):
        """One step of the search from k_in hypotheses an article (K in the loop; 1 at the
        first step) to K; returns the new loop variables (compaction is the loop's)."""
        step, ex = lv["step"], lv["ex"]
        b = tf.shape(lv["orig"])[0]
        log_probs, state, step_ex = step_fn(lv["ids"], step, lv["state"])
        seq = tf.reshape(lv["alive_seq"], [b * k_in, T])
        if isinstance(log_probs, Mixture):
            ban_idx, ban_values = ban_entries(b * k_in, seq, step, stop_id, min_steps, unk_id,
                                              block_trigrams, repeat_exempt)
            top_scores, beam_idx, token = mixture_candidates(log_probs, ban_idx, ban_values,
                                                             lv["alive_logp"], pool)
        else:
            log_probs = constrain(tf.cast(log_probs, tf.float32), seq, step, stop_id,
                                  min_steps, unk_id, block_trigrams, repeat_exempt)
            top_scores, beam_idx, token = top_candidates(log_probs, lv["alive_logp"], pool)
        if first:  # at least K candidates (fewer only when W < K), the missing ones invalid;
            # in the loop K * min(2K, W) >= K
            short = tf.maximum(K - tf.shape(top_scores)[1], 0)
            top_scores = tf.pad(top_scores, [[0, 0], [0, short]], constant_values=NEG_INF * 2)
            beam_idx = tf.pad(beam_idx, [[0, 0], [0, short]])
            token = tf.pad(token, [[0, 0], [0, short]])
        here = tf.equal(tf.range(T), step)  # [T]
        cand_seq = tf.where(here[None, None, :], token[:, :, None],
                            tf.gather(lv["alive_seq"], beam_idx, batch_dims=1))  # [b, P, T]
        is_stop = tf.equal(token, stop_id)
        valid = top_scores > NEG_INF / 2
        if recombine_window:
            valid &= ~_recombined(cand_seq, is_stop, valid, step, int(recombine_window))

        # Live hypotheses: the best K candidates that did not stop.
        live_scores = tf.where(is_stop | ~valid, NEG_INF * 2, top_scores)
        new_logp, live_pos = tf.math.top_k(live_scores, k=K)  # [b, K]
        new_logp = tf.maximum(new_logp, NEG_INF)
        parent = tf.gather(beam_idx, live_pos, batch_dims=1)  # [b, K]
        state = reorder_state(state, tf.reshape(parent + tf.range(b)[:, None] * k_in, [-1]))
        new_ids = tf.reshape(tf.gather(token, live_pos, batch_dims=1), [-1])
        new_seq = tf.gather(cand_seq, live_pos, batch_dims=1)

        step_attn = None
        if beta > 0 or "attn" in extras or "src_pos" in extras:
            step_attn = tf.reshape(tf.cast(step_ex["attn"], tf.float32),
                                   [b, k_in, -1])  # [b, k_in, L]
        cand_pen = 0.0
        new_ex = {}
        if beta > 0:
            cand_cov = (tf.gather(ex["alive_cov"], beam_idx, batch_dims=1)
                        + tf.gather(step_attn, beam_idx, batch_dims=1))  # [b, P, L]
            cand_pen = gnmt_coverage_penalty(cand_cov, beta)  # [b, P]
            new_ex["alive_cov"] = tf.gather(cand_cov, live_pos, batch_dims=1)

        # Finished hypotheses: merge the stopped candidates into the K best so far.
        # As in See et al.'s code, a stopped candidate counts only if it ranks above the K-th
        # live one (so beam 1 is exactly greedy search).
        live_before = tf.cumsum(tf.cast(~is_stop & valid, tf.int32), axis=1, exclusive=True)
        accepted = is_stop & valid & (live_before < K)
        stop_norm = top_scores / length_norm(step + 1, length_penalty) + cand_pen
        all_scores = tf.concat([lv["fin_score"], tf.where(accepted, stop_norm, NEG_INF)], 1)
        fin_score, fin_pos = tf.math.top_k(all_scores, k=K)  # [b, K]
        fin_seq = tf.gather(tf.concat([lv["fin_seq"], cand_seq], 1), fin_pos, batch_dims=1)
        fin_len = tf.gather(tf.concat([lv["fin_len"], tf.fill(tf.shape(token), step)], 1),
                            fin_pos, batch_dims=1)

        for x in extras:
            if x == "attn":
                now = step_attn
            elif x == "p_gen":
                now = tf.reshape(tf.cast(step_ex["p_gen"], tf.float32), [b, k_in])
            else:
                now = tf.argmax(step_attn, axis=-1, output_type=tf.int32)
            at = tf.reshape(here, [1, 1, -1] + [1] * (now.shape.rank - 2))
            cand = tf.where(at, tf.expand_dims(tf.gather(now, beam_idx, batch_dims=1), 2),
                            tf.gather(ex[f"alive_{x}"], beam_idx, batch_dims=1))  # [b, P, T..]
            new_ex[f"alive_{x}"] = tf.gather(cand, live_pos, batch_dims=1)
            new_ex[f"fin_{x}"] = tf.gather(tf.concat([ex[f"fin_{x}"], cand], 1), fin_pos,
                                           batch_dims=1)

        # Articles that finish now (K results, or the last step) write their result.
        write = ~lv["done"] & ((fin_score[:, -1] > NEG_INF / 2) | (step + 1 >= T))  # [b]
        has_fin = fin_score[:, 0] > NEG_INF / 2
        # An article with no finished hypothesis keeps its best live one.
        alive_final = new_logp / length_norm(step + 1, length_penalty)  # [b, K]
        if beta > 0:
            alive_final += gnmt_coverage_penalty(new_ex["alive_cov"], beta)
        best_alive = tf.argmax(alive_final, axis=1, output_type=tf.int32)  # [b]
        length = tf.where(has_fin, fin_len[:, 0], step + 1)
        keep = tf.range(T)[None, :] < length[:, None]  # [b, T]

        def best(fin, alive):
            x = tf.where(tf.reshape(has_fin, [-1] + [1] * (fin.shape.rank - 2)), fin[:, 0],
                         tf.gather(alive, best_alive, batch_dims=1))
            return tf.where(tf.reshape(keep, [b, T] + [1] * (fin.shape.rank - 3)), x,
                            tf.zeros_like(x))

        result = {
            "ids": best(fin_seq, new_seq),
            "length": length,
            "score": tf.where(has_fin, fin_score[:, 0], tf.reduce_max(alive_final, axis=1)),
        }
        for x in extras:
            result[x] = best(new_ex[f"fin_{x}"], new_ex[f"alive_{x}"])
        rows = tf.where(write)  # [m, 1]
        target = tf.gather_nd(lv["orig"], rows)[:, None]  # [m, 1]
        out = {k: tf.tensor_scatter_nd_update(v, target, tf.gather_nd(result[k], rows))
               for k, v in lv["out"].items()}
        return {
            "step": step + 1, "orig": lv["orig"], "done": lv["done"] | write, "ids": new_ids,
            "alive_seq": new_seq, "alive_logp": new_logp, "fin_seq": fin_seq,
            "fin_score": fin_score, "fin_len": fin_len, "state": state, "ex": new_ex, "out": out,
        }

    def body(lv):
        new = advance(lv, K)
        if compact_below > 0:
            done, b = new["done"], tf.shape(new["orig"])[0]
            n_live = tf.reduce_sum(tf.cast(~done, tf.int32))
            shrink = ((n_live > 0) & (n_live < b)
                      & (tf.cast(n_live, tf.float32) <= compact_below * tf.cast(b, tf.float32)))
            new = tf.cond(shrink, lambda: _compact(new, tf.where(~done)[:, 0], K, article_keys),
                          lambda: new)
        return (tf.nest.map_structure(tf.ensure_shape, new, invariants),)

    def first_step():
        """Step 0 from one hypothesis an article: the K beams start as K copies of the same
        state and [START], so one row of each does the step's work (the vocabulary layer on B
        rows, not B*K); the live hypotheses it keeps take the tiled per-article tensors."""
        rows = tf.range(B) * K
        one = dict(lv, ids=tf.gather(lv["ids"], rows), alive_seq=lv["alive_seq"][:, :1],
                   alive_logp=lv["alive_logp"][:, :1],
                   ex={k: (v[:, :1] if k.startswith("alive_") else v)
                       for k, v in lv["ex"].items()},
                   state=map_state(lv["state"], lambda t: tf.gather(t, rows),
                                   lambda t: tf.gather(t, rows)))
        new = advance(one, 1, first=True)
        new["state"] = _with_article(new["state"], lv["state"])
        return new

    def dynamic(t):
        return tf.TensorShape([None]).concatenate(t.shape[1:])

    invariants = {k: (tf.nest.map_structure(lambda t: t.shape, v) if k in ("step", "out")
                      else tf.nest.map_structure(dynamic, v)) for k, v in lv.items()
                  if k != "state"}
    invariants["state"] = map_state(lv["state"], dynamic, dynamic, lambda t: t.shape)
    invariants = {k: invariants[k] for k in lv}
    # The first step runs outside the loop (first_step); not for an empty batch or T = 0,
    # where the loop itself does nothing.
    lv = tf.cond(tf.logical_and(T > 0, B > 0), first_step, lambda: lv)
    lv = tf.nest.map_structure(tf.ensure_shape, lv, invariants)
    (lv,) = tf.while_loop(cond, body, (lv,), shape_invariants=(invariants,))
    return lv["out"]


def _with_article(state, source):
    """`state` with its ARTICLE tensors taken from `source` (a nest of the same structure)."""

    def walk(x, y, in_article):
        if isinstance(x, dict):
            return {k: walk(v, y[k], in_article or k == ARTICLE) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, w, in_article) for v, w in zip(x, y))
        return y if in_article else x

    return walk(state, source, False)


def _compact(lv: dict, keep: tf.Tensor, beam_size, article_keys) -> dict:
    """Keeps the articles `keep` (int [m]) of every per-article and per-hypothesis tensor."""
    rows = tf.reshape(tf.cast(keep, tf.int32)[:, None] * beam_size + tf.range(beam_size), [-1])
    out = dict(lv)
    for k in article_keys:
        out[k] = tf.nest.map_structure(lambda t: tf.gather(t, keep), lv[k])
    out["ids"] = tf.gather(lv["ids"], rows)
    out["state"] = map_state(lv["state"], lambda t: tf.gather(t, rows),
                             lambda t: tf.gather(t, rows))
    return out
