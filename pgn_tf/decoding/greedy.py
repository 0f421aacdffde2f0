"""Greedy (and, via sampling.py, ancestral-sampling) decoding: one hypothesis an article, as a
decoding strategy on the driver beam search runs on (`strategy.dynamic_decode`).

Returns per-step log-probabilities of the chosen tokens too, which the self-critical RL
objective (Paulus et al. 2017) needs for its sampled sequence. Written against the search
interface step_fn(ids int32 [B], step, state) -> (log_probs float [B, W], state, extras): a
pointer model's distribution comes whole here (greedy and sampling read every entry).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from pgn_tf.decoding.constraints import Constraints
from pgn_tf.decoding.ranking import length_norm
from pgn_tf.decoding.strategy import DecodingStrategy, dynamic_decode


class GreedyState(NamedTuple):
    """The loop state of `GreedySearch`: B articles, T = max_steps."""

    ids: tf.Tensor  # int32 [B]: each row's last token, the next step's input
    seq: tf.Tensor  # int32 [B, T]: the chosen tokens ([STOP] included)
    logps: tf.Tensor  # float32 [B, T]: log p of each chosen token (0 after the end)
    done: tf.Tensor  # bool [B]: emitted [STOP]
    length: tf.Tensor  # int32 [B]: tokens before [STOP]
    src_pos: tf.Tensor  # int32 [B, T]: the attention's argmax at each step (return_src_pos)
    stats: tf.Tensor  # float32 [B, 2]: running sums of entropy and p_gen (return_stats)
    model_state: Any  # step_fn's nest of [B, ...]


class GreedySearch(DecodingStrategy):
    """Each step takes the argmax (or, with `sample`, a draw from the distribution at
    `temperature`) of every live row, under the same constraints as beam search.

    Args (all but step_fn by name):
      step_fn: the search interface (module docstring).
      batch_size B, max_steps T: ints or int32 scalars; start_id: the [START] id.
      constraints: decoding.constraints.Constraints.
      sample, temperature, seed: ancestral sampling (decoding.sampling).
      return_src_pos, return_stats: see `search`.
    """

    def __init__(self, step_fn, *, batch_size, max_steps, start_id: int,
                 constraints: Constraints, sample: bool = False, temperature: float = 1.0,
                 seed: int | None = None, return_src_pos: bool = False,
                 return_stats: bool = False):
        self.step_fn = step_fn
        self.batch_size, self.max_steps, self.start_id = batch_size, max_steps, start_id
        self.constraints = constraints
        self.sample, self.temperature, self.seed = sample, temperature, seed
        self.return_src_pos, self.return_stats = return_src_pos, return_stats

    def initialize(self, model_state) -> GreedyState:
        B, T = self.batch_size, self.max_steps
        return GreedyState(ids=tf.fill([B], self.start_id), seq=tf.zeros([B, T], tf.int32),
                           logps=tf.zeros([B, T]), done=tf.zeros([B], tf.bool),
                           length=tf.zeros([B], tf.int32), src_pos=tf.zeros([B, T], tf.int32),
                           stats=tf.zeros([B, 2]), model_state=model_state)

    def running(self, step, state: GreedyState):
        return tf.logical_and(step < self.max_steps, tf.logical_not(tf.reduce_all(state.done)))

    def step(self, step, state: GreedyState) -> GreedyState:
        log_probs, model_state, extras = self.step_fn(state.ids, step, state.model_state)
        log_probs = self.constraints.apply(tf.cast(log_probs, tf.float32), state.seq, step)
        if self.sample:
            token = tf.random.categorical(log_probs / self.temperature, 1, seed=self.seed,
                                          dtype=tf.int32)[:, 0]
        else:
            token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_logp = tf.gather(log_probs, token, batch_dims=1)
        here = tf.equal(tf.range(self.max_steps), step)[None, :]
        live = ~state.done
        at = here & live[:, None]  # [B, T]: this step's position of the live rows
        src_pos, stats = state.src_pos, state.stats
        if self.return_src_pos:
            pos = tf.argmax(extras["attn"], axis=-1, output_type=tf.int32)
            src_pos = tf.where(at, pos[:, None], src_pos)
        if self.return_stats:
            lp = tf.stop_gradient(log_probs)
            entropy = -tf.reduce_sum(tf.math.multiply_no_nan(lp, tf.exp(lp)), axis=-1)
            p_gen = tf.stop_gradient(tf.cast(extras.get("p_gen", tf.ones_like(entropy)),
                                             tf.float32))
            stats += tf.where(live[:, None], tf.stack([entropy, p_gen], axis=1), 0.0)
        stopped = live & tf.equal(token, self.constraints.stop_id)
        return GreedyState(ids=token, seq=tf.where(at, token[:, None], state.seq),
                           logps=tf.where(at, token_logp[:, None], state.logps),
                           done=state.done | stopped,
                           length=tf.where(live & ~stopped, state.length + 1, state.length),
                           src_pos=src_pos, stats=stats, model_state=model_state)

    def finalize(self, state: GreedyState) -> dict:
        keep = tf.range(self.max_steps)[None, :] < state.length[:, None]
        emitted = state.length + tf.cast(state.done, tf.int32)
        out = {"src_pos": tf.where(keep, state.src_pos, 0)} if self.return_src_pos else {}
        if self.return_stats:
            mean = state.stats / tf.cast(tf.maximum(emitted, 1), tf.float32)[:, None]
            out.update(entropy=mean[:, 0], p_gen=mean[:, 1])
        return {
            **out,
            "ids": tf.where(keep, state.seq, 0),
            "length": state.length,
            "step_log_probs": state.logps,
            "score": tf.reduce_sum(state.logps, axis=1) / length_norm(emitted, 0.0),
        }


def search(step_fn, initial_state, **kwargs) -> dict:
    """One hypothesis per article, B at once: `GreedySearch(step_fn, **kwargs)` (arguments by
    name) by `dynamic_decode` from `initial_state`, a nest of [B, ...] tensors.

    Returns dict: ids int32 [B, T] (0 after the end, [STOP] excluded), length int32 [B],
    step_log_probs float32 [B, T] (log p of each chosen token, [STOP] included, 0 after),
    score float32 [B] (the beam's score: summed log-prob over len(tokens) with [START] and
    [STOP] counted, as See et al.'s avg_log_prob); with return_src_pos, src_pos int32 [B, T]:
    the argmax of step_fn's extra "attn" at each step (beam_search's "src_pos"); with
    return_stats, entropy and p_gen float32 [B]: the mean over the emitted steps of the entropy
    (nats) of the distribution each token was chosen from, and of step_fn's extra "p_gen" (1
    when it has none); diagnostics, without gradient.
    """
    return dynamic_decode(GreedySearch(step_fn, **kwargs), initial_state)
