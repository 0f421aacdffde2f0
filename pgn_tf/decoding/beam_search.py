"""Batched beam search in one tf.while_loop: every article x every beam advances together, and
each article stops at its own K finished hypotheses.

Written against the one interface every search shares (docs/design.md) and nothing else:
    step_fn(ids int32 [N], step int32, state) -> (log_probs float32 [N, W], state, extras)
where N = b*K rows (b articles still decoding, K beams each), W the (extended) vocabulary width
and `state` any nest of [N, ...] tensors. A pointer model may return its distribution in parts
instead, a `layers.pointer.Mixture` (P_vocab, p_gen, the attention and the source ids): the
search then hands it to `decoding.mixture`, which scores only the tokens that can rank among the
best (the vocabulary's best and the article's own, See et al.'s eq. 9), never forming the [N, W]
log-probabilities; the result is the same. A dense distribution goes to `decoding.candidates`.
Three dict keys of the state are special:
  ARTICLE ("per_article"): tensors that are the same for the K beams of an article (the tiled
    encoder outputs, masks, extended ids). Beam reordering leaves them alone; they are gathered
    only when finished articles leave the batch.
  SHARED ("shared"): per-batch tensors (a tied output matrix), never tiled nor gathered.
  ONCE ("once"): tensors an article holds once ([b, ...], not tiled; the step broadcasts them
    over the K beams), gathered by article when finished articles leave the batch.
Beyond choosing where a step's candidates come from (a Mixture or a dense distribution), the
search knows nothing about pointers or coverage; it reads the extras "attn" float [N, L] (GNMT
coverage penalty, `return_extras`) and "p_gen" float [N] (`return_extras`) only. What it may
not emit is one `decoding.constraints.Constraints`, passed by name.

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
batch: when the live articles fall to `compact_below` of the rows being decoded, every
per-article and per-hypothesis tensor is gathered down to them (the loop's batch dimension is
dynamic); a finished article's result is written into [B, ...] output buffers at its original
index the step it finishes. Which articles stay, and the gather that keeps them, are
`pgn_tf.decoding.compaction`'s (with `row_buckets`, powers of two of articles only, for
decode.jit_step).

Structure (OpenNMT-tf's DecodingStrategy): `BeamSearch` holds the rules, `BeamState` the loop
state (each field with its dtype and shape), `strategy.dynamic_decode` the tf.while_loop (which
runs greedy and sampling search too, decoding.greedy).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from pgn_tf.decoding.beam_state import map_state, reorder_state, wanted_extras, with_article
from pgn_tf.decoding.candidates import top_candidates
from pgn_tf.decoding.compaction import batch_after, compact, kept_articles
from pgn_tf.decoding.constraints import NEG_INF, Constraints
from pgn_tf.decoding.mixture import mixture_candidates
from pgn_tf.decoding.ranking import gnmt_coverage_penalty, length_norm, recombined
from pgn_tf.decoding.strategy import DecodingStrategy, dynamic_decode
from pgn_tf.layers.pointer import Mixture


class BeamState(NamedTuple):
    """The loop state of `BeamSearch`, each field with its dtype and shape: b live articles (B at
    the start; finished ones leave the batch, `BeamSearch.step`), K beams, T = max_steps, L the
    source length. A field that is off holds () (an empty nest)."""

    orig: tf.Tensor  # int32 [b]: each live article's index in the batch (where its result goes)
    done: tf.Tensor  # bool [b]: finished (result written), not yet compacted away
    ids: tf.Tensor  # int32 [b*K]: the last token of each hypothesis, the next step's input
    alive_seq: tf.Tensor  # int32 [b, K, T]: tokens of the live hypotheses (without [START])
    alive_logp: tf.Tensor  # float32 [b, K]: their summed log-probabilities (-1e9: empty slot)
    alive_cov: Any  # float32 [b, K, L]: their attention sums (coverage_penalty > 0; else ())
    alive_extras: dict  # name -> [b, K, T, ...]: their requested extras (`EXTRAS`)
    fin_seq: tf.Tensor  # int32 [b, K, T]: finished hypotheses ([STOP] stored at fin_len)
    fin_score: tf.Tensor  # float32 [b, K]: their normalised scores, best first (-1e9: empty)
    fin_len: tf.Tensor  # int32 [b, K]: their tokens before [STOP]
    fin_extras: dict  # name -> [b, K, T, ...]: their requested extras
    model_state: Any  # step_fn's nest of [b*K, ...] (ARTICLE part too; SHARED as it is)
    out: dict  # name -> [B, ...]: each article's result at its original index (beam_search)


class _Candidates(NamedTuple):
    """One step's P best extensions of each article's hypotheses, best first."""

    score: tf.Tensor  # float32 [b, P]: summed log-probability (< -5e8: banned or no candidate)
    beam: tf.Tensor  # int32 [b, P]: the hypothesis it extends (of the article's k_in)
    token: tf.Tensor  # int32 [b, P]: the token it adds
    seq: tf.Tensor  # int32 [b, P, T]: its tokens
    is_stop: tf.Tensor  # bool [b, P]: the token is [STOP]
    valid: tf.Tensor  # bool [b, P]: neither banned, missing nor recombined away


class BeamSearch(DecodingStrategy):
    """The search of the module docstring as a decoding strategy over a `BeamState`: one
    `step` scores every extension, selects the candidates, keeps the finished hypotheses and
    reorders the state (`beam_search` runs it).

    Args (all but step_fn by name):
      step_fn: the search interface (module docstring).
      batch_size B, beam_size K, max_steps T: ints or int32 scalars.
      start_id: the [START] id.
      constraints: what may not be emitted (decoding.constraints.Constraints: [STOP] before
        min_steps, [UNK], trigram blocking, the repeated-word block).
      length_penalty: 0 = average log-prob (See et al.), alpha > 0 = GNMT's.
      return_extras: True (= ("attn", "p_gen")) or a tuple of "attn", "p_gen", "src_pos": the
        best hypothesis' attention [B, T, L], p_gen [B, T], argmax of the attention int32
        [B, T] (step_fn's extras "attn" [N, L] and "p_gen" [N]); "attn" needs src_len.
      coverage_penalty: GNMT's beta (0 = off); needs src_len and the extra "attn".
      recombine_window: C > 0 merges hypotheses with the same last C ids (0 = off).
      compact_below: finished articles leave the batch once the live ones are at most this
        share of the rows decoded (1.0: at every step where one finishes; 0: never).
      row_buckets: the batch shrinks only to powers of two of articles: the live ones and, as
        padding, finished ones, which run on but never write again (`step`).

    The result (`finalize`, and so `beam_search`), a dict:
      ids int32 [B, T] best hypothesis (padded with 0 after its end, [STOP] excluded),
      length int32 [B] (tokens before [STOP]), score float32 [B] (its ranking score),
      and the requested extras (zero after the end).
    """

    first_step_apart = True

    def __init__(
        self,
        step_fn,
        *,
        batch_size,
        beam_size,
        max_steps,
        start_id: int,
        constraints: Constraints,
        length_penalty: float = 0.0,
        return_extras=False,
        src_len=None,
        coverage_penalty: float = 0.0,
        recombine_window: int = 0,
        compact_below: float = 1.0,
        row_buckets: bool = False,
    ):
        self.step_fn = step_fn
        self.batch_size, self.beam_size, self.max_steps = batch_size, beam_size, max_steps
        self.start_id, self.stop_id = start_id, constraints.stop_id
        self.constraints = constraints
        self.length_penalty = length_penalty
        self.extras = wanted_extras(return_extras)
        self.src_len = src_len
        self.beta = float(coverage_penalty or 0.0)
        self.recombine_window = int(recombine_window or 0)
        self.compact_below = compact_below
        self.row_buckets = row_buckets
        if ("attn" in self.extras or self.beta > 0) and src_len is None:
            raise ValueError("beam_search: src_len is needed for the attention extras and the "
                             "coverage penalty")
        self.pool = 2 * beam_size
        if self.recombine_window:
            self.pool = tf.maximum(self.pool, beam_size * beam_size)

    def initialize(self, model_state) -> BeamState:
        """[START] for every hypothesis and only the first beam live, so that the K beams do not
        start as K copies; no finished hypothesis; zero results."""
        B, K, T = self.batch_size, self.beam_size, self.max_steps
        out = {"ids": tf.zeros([B, T], tf.int32), "length": tf.zeros([B], tf.int32),
               "score": tf.zeros([B])}
        alive_extras, fin_extras = {}, {}
        for x in self.extras:
            tail = [self.src_len] if x == "attn" else []
            dtype = tf.int32 if x == "src_pos" else tf.float32
            alive_extras[x] = tf.zeros([B, K, T] + tail, dtype)
            fin_extras[x] = tf.zeros([B, K, T] + tail, dtype)
            out[x] = tf.zeros([B, T] + tail, dtype)
        return BeamState(
            orig=tf.range(B),
            done=tf.zeros([B], tf.bool),
            ids=tf.fill([B * K], self.start_id),
            alive_seq=tf.zeros([B, K, T], tf.int32),
            alive_logp=tf.tile(tf.concat([[0.0], tf.fill([K - 1], NEG_INF)], 0)[None, :], [B, 1]),
            alive_cov=tf.zeros([B, K, self.src_len]) if self.beta > 0 else (),
            alive_extras=alive_extras,
            fin_seq=tf.zeros([B, K, T], tf.int32),
            fin_score=tf.fill([B, K], NEG_INF),
            fin_len=tf.zeros([B, K], tf.int32),
            fin_extras=fin_extras,
            model_state=model_state,
            out=out,
        )

    def running(self, step, state: BeamState):
        """An article stops at its K finished hypotheses; the search when all have, or at T."""
        return tf.logical_and(step < self.max_steps, tf.reduce_any(~state.done))

    def shape_invariants(self, state: BeamState) -> BeamState:
        """The batch dimension of every per-article and per-hypothesis tensor is dynamic
        (finished articles leave the batch); SHARED tensors, scalars and `out` keep theirs."""

        def dynamic(t):
            return tf.TensorShape([None]).concatenate(t.shape[1:])

        def fixed(t):
            return t.shape

        rows = tf.nest.map_structure(dynamic, state._replace(model_state=(), out=()))
        model_state = map_state(state.model_state, dynamic, dynamic, fixed, on_once=dynamic)
        return rows._replace(model_state=model_state,
                             out=tf.nest.map_structure(fixed, state.out))

    def first_step(self, step, state: BeamState) -> BeamState:
        """Step 0 from one hypothesis an article: the K beams start as K copies of the same
        state and [START], so one row of each does the step's work (the vocabulary layer on B
        rows, not B*K); the live hypotheses it keeps take the tiled per-article tensors."""
        rows = tf.range(self.batch_size) * self.beam_size

        def first_row(t):
            return tf.gather(t, rows)

        def first_beam(t):
            return t[:, :1]

        one = state._replace(
            ids=first_row(state.ids),
            alive_seq=first_beam(state.alive_seq),
            alive_logp=first_beam(state.alive_logp),
            alive_cov=tf.nest.map_structure(first_beam, state.alive_cov),
            alive_extras=tf.nest.map_structure(first_beam, state.alive_extras),
            model_state=map_state(state.model_state, first_row, first_row),
        )
        new = self._advance(step, one, 1, first=True)
        return new._replace(model_state=with_article(new.model_state, state.model_state))

    def step(self, step, state: BeamState) -> BeamState:
        """One step of the K hypotheses of every live article; then, once the live articles are
        at most `compact_below` of the rows decoded, the finished ones leave the batch (the
        later steps run on fewer rows)."""
        new = self._advance(step, state, self.beam_size)
        if self.compact_below <= 0:
            return new
        shrink, size = batch_after(new.done, self.compact_below, self.row_buckets)
        return tf.cond(shrink, lambda: compact(new, kept_articles(new.done, size),
                                               self.beam_size), lambda: new)

    def finalize(self, state: BeamState) -> dict:
        """The results each article wrote the step it finished (`beam_search`'s Returns)."""
        return state.out

    def _advance(self, step, state: BeamState, k_in, first: bool = False) -> BeamState:
        """One step from k_in hypotheses an article (K; 1 at the first step) to K: the model
        scores every extension, the best live and finished ones are kept, the model state follows
        the live ones, and the articles that finish now write their result."""
        b = tf.shape(state.orig)[0]
        here = tf.equal(tf.range(self.max_steps), step)  # [T]: this step's position
        log_probs, model_state, step_ex = self.step_fn(state.ids, step, state.model_state)
        cand = self._candidates(step, here, state, log_probs, b, k_in, first)
        live_pos, alive_logp = self._select_live(cand)
        now = self._step_extras(step_ex, b, k_in)
        cand_cov, cand_pen = self._coverage(state, now, cand)
        fin_pos, fin_score, fin_seq, fin_len = self._select_finished(step, state, cand, cand_pen)
        alive_extras, fin_extras = self._follow_extras(here, state, now, cand, live_pos, fin_pos)

        def live(t):
            return tf.gather(t, live_pos, batch_dims=1)

        parent = live(cand.beam) + tf.range(b)[:, None] * k_in  # [b, K] rows of model_state
        new = state._replace(
            ids=tf.reshape(live(cand.token), [-1]),
            alive_seq=live(cand.seq),
            alive_logp=alive_logp,
            alive_cov=tf.nest.map_structure(live, cand_cov),
            alive_extras=alive_extras,
            fin_seq=fin_seq,
            fin_score=fin_score,
            fin_len=fin_len,
            fin_extras=fin_extras,
            model_state=reorder_state(model_state, tf.reshape(parent, [-1])),
        )
        return self._write_finished(step, new)

    def _candidates(self, step, here, state: BeamState, log_probs, b, k_in,
                    first: bool) -> _Candidates:
        """See et al.: every hypothesis extended by every token, the best `pool` (2K) of an
        article by summed log-probability, under the constraints (min length, no-UNK, trigram
        blocking of Paulus et al. 2017, the repeated-word block). A `Mixture` is searched in
        parts (decoding.mixture), a dense distribution whole (decoding.candidates)."""
        seq = tf.reshape(state.alive_seq, [b * k_in, self.max_steps])
        if isinstance(log_probs, Mixture):
            scores, beam, token = mixture_candidates(log_probs, self.constraints, seq, step,
                                                     state.alive_logp, self.pool)
        else:
            log_probs = self.constraints.apply(tf.cast(log_probs, tf.float32), seq, step)
            scores, beam, token = top_candidates(log_probs, state.alive_logp, self.pool)
        if first:  # at least K candidates (fewer only when W < K), the missing ones invalid;
            # in the loop K * min(2K, W) >= K
            short = tf.maximum(self.beam_size - tf.shape(scores)[1], 0)
            scores = tf.pad(scores, [[0, 0], [0, short]], constant_values=NEG_INF * 2)
            beam = tf.pad(beam, [[0, 0], [0, short]])
            token = tf.pad(token, [[0, 0], [0, short]])
        cand_seq = tf.where(here[None, None, :], token[:, :, None],
                            tf.gather(state.alive_seq, beam, batch_dims=1))  # [b, P, T]
        is_stop = tf.equal(token, self.stop_id)
        valid = scores > NEG_INF / 2
        if self.recombine_window:
            valid &= ~recombined(cand_seq, is_stop, valid, step, self.recombine_window)
        return _Candidates(scores, beam, token, cand_seq, is_stop, valid)

    def _select_live(self, cand: _Candidates):
        """See et al.: the best K candidates that did not stop stay live. Returns (their
        positions in `cand` int32 [b, K], their log-probabilities float32 [b, K], -1e9 for an
        empty slot)."""
        live_scores = tf.where(cand.is_stop | ~cand.valid, NEG_INF * 2, cand.score)
        alive_logp, live_pos = tf.math.top_k(live_scores, k=self.beam_size)
        return live_pos, tf.maximum(alive_logp, NEG_INF)

    def _step_extras(self, step_ex: dict, b, k_in) -> dict:
        """This step's extras of each hypothesis, name -> [b, k_in, ...]: "attn" float32
        [b, k_in, L] (for the coverage penalty too), "p_gen" float32, "src_pos" int32 (the
        attention's argmax, for replace_unk)."""
        now = {}
        if self.beta > 0 or "attn" in self.extras or "src_pos" in self.extras:
            now["attn"] = tf.reshape(tf.cast(step_ex["attn"], tf.float32), [b, k_in, -1])
        if "p_gen" in self.extras:
            now["p_gen"] = tf.reshape(tf.cast(step_ex["p_gen"], tf.float32), [b, k_in])
        if "src_pos" in self.extras:
            now["src_pos"] = tf.argmax(now["attn"], axis=-1, output_type=tf.int32)
        return now

    def _coverage(self, state: BeamState, now: dict, cand: _Candidates):
        """Wu et al. (2016) eq. 14, GNMT's coverage penalty of each candidate: its parent's
        attention sums plus this step's attention (float32 [b, P, L]) and the penalty of those
        (float32 [b, P]); ((), 0.0) when coverage_penalty is 0."""
        if self.beta <= 0:
            return (), 0.0
        cov = (tf.gather(state.alive_cov, cand.beam, batch_dims=1)
               + tf.gather(now["attn"], cand.beam, batch_dims=1))  # [b, P, L]
        return cov, gnmt_coverage_penalty(cov, self.beta)

    def _select_finished(self, step, state: BeamState, cand: _Candidates, cand_pen):
        """See et al.: a candidate ending in [STOP] joins the article's K best finished
        hypotheses if it ranks above the K-th live one (so beam 1 is exactly greedy search),
        scored by `length_norm` (average log-prob, or GNMT's length penalty) plus the coverage
        penalty. Returns (their positions in [finished so far; candidates] int32 [b, K], scores,
        tokens, lengths)."""
        live_before = tf.cumsum(tf.cast(~cand.is_stop & cand.valid, tf.int32), axis=1,
                                exclusive=True)
        accepted = cand.is_stop & cand.valid & (live_before < self.beam_size)
        stop_norm = cand.score / length_norm(step + 1, self.length_penalty) + cand_pen
        all_scores = tf.concat([state.fin_score, tf.where(accepted, stop_norm, NEG_INF)], 1)
        fin_score, fin_pos = tf.math.top_k(all_scores, k=self.beam_size)  # [b, K]
        fin_seq = tf.gather(tf.concat([state.fin_seq, cand.seq], 1), fin_pos, batch_dims=1)
        fin_len = tf.gather(tf.concat([state.fin_len, tf.fill(tf.shape(cand.token), step)], 1),
                            fin_pos, batch_dims=1)
        return fin_pos, fin_score, fin_seq, fin_len

    def _follow_extras(self, here, state: BeamState, now: dict, cand: _Candidates, live_pos,
                       fin_pos):
        """The requested extras follow their hypotheses: a candidate's are its parent's with this
        step's at this step's position (`here`), then the live and finished ones are selected
        as the hypotheses are. Returns (alive, finished) dicts of [b, K, T, ...]."""
        alive, fin = {}, {}
        for x in self.extras:
            at = tf.reshape(here, [1, 1, -1] + [1] * (now[x].shape.rank - 2))
            cand_x = tf.where(at, tf.expand_dims(tf.gather(now[x], cand.beam, batch_dims=1), 2),
                              tf.gather(state.alive_extras[x], cand.beam,
                                        batch_dims=1))  # [b, P, T, ...]
            alive[x] = tf.gather(cand_x, live_pos, batch_dims=1)
            fin[x] = tf.gather(tf.concat([state.fin_extras[x], cand_x], 1), fin_pos,
                               batch_dims=1)
        return alive, fin

    def _best(self, step, state: BeamState) -> dict:
        """Each article's result if it stopped after `step`, dict of [b, ...]: its best finished
        hypothesis or, with none, its best live one by the same score (See et al.'s fallback);
        tokens and extras zero after the end."""
        T = self.max_steps
        has_fin = state.fin_score[:, 0] > NEG_INF / 2  # [b]
        alive_final = state.alive_logp / length_norm(step + 1, self.length_penalty)  # [b, K]
        if self.beta > 0:
            alive_final += gnmt_coverage_penalty(state.alive_cov, self.beta)
        best_alive = tf.argmax(alive_final, axis=1, output_type=tf.int32)  # [b]
        length = tf.where(has_fin, state.fin_len[:, 0], step + 1)
        keep = tf.range(T)[None, :] < length[:, None]  # [b, T]

        def pick(fin, alive):
            x = tf.where(tf.reshape(has_fin, [-1] + [1] * (fin.shape.rank - 2)), fin[:, 0],
                         tf.gather(alive, best_alive, batch_dims=1))
            return tf.where(tf.reshape(keep, [-1, T] + [1] * (fin.shape.rank - 3)), x,
                            tf.zeros_like(x))

        result = {
            "ids": pick(state.fin_seq, state.alive_seq),
            "length": length,
            "score": tf.where(has_fin, state.fin_score[:, 0], tf.reduce_max(alive_final, axis=1)),
        }
        for x in self.extras:
            result[x] = pick(state.fin_extras[x], state.alive_extras[x])
        return result

    def _write_finished(self, step, state: BeamState) -> BeamState:
        """Articles that finish after `step` (K finished hypotheses, or the last step) write
        their result into `out` at their original index and are marked done."""
        write = ~state.done & ((state.fin_score[:, -1] > NEG_INF / 2)
                               | (step + 1 >= self.max_steps))  # [b]
        result = self._best(step, state)
        rows = tf.where(write)  # [m, 1]
        target = tf.gather_nd(state.orig, rows)[:, None]  # [m, 1]
        out = {k: tf.tensor_scatter_nd_update(v, target, tf.gather_nd(result[k], rows))
               for k, v in state.out.items()}
        return state._replace(done=state.done | write, out=out)


def beam_search(step_fn, initial_state, **kwargs):
    """Runs the search (semantics in the module docstring): `BeamSearch(step_fn, **kwargs)` by
    `dynamic_decode` from `initial_state`, a nest of [B*K, ...] tensors (already tiled with
    `tile_beams`). The arguments, by name, and the result are `BeamSearch`'s."""
    return dynamic_decode(BeamSearch(step_fn, **kwargs), initial_state)
