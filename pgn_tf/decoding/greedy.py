"""Greedy (and, via sampling.py, ancestral-sampling) decoding against the search interface.

Returns per-step log-probabilities of the chosen tokens too, which the self-critical RL
objective (Paulus et al. 2017) needs for its sampled sequence.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.decoding.beam_search import constrain, keep_shapes, length_norm


def search(
    step_fn,
    initial_state,
    batch_size,
    max_steps,
    start_id: int,
    stop_id: int,
    min_steps=0,
    block_trigrams: bool = False,
    unk_id: int | None = None,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
    repeat_exempt=None,
    return_src_pos: bool = False,
):
    """One hypothesis per article, B at once; the constraints are beam_search's (`constrain`).

    Returns dict: ids int32 [B, T] (0 after the end, [STOP] excluded), length int32 [B],
    step_log_probs float32 [B, T] (log p of each chosen token, [STOP] included, 0 after),
    score float32 [B] (the beam's score: summed log-prob over len(tokens) with [START] and
    [STOP] counted, as See et al.'s avg_log_prob); with return_src_pos, src_pos int32 [B, T]:
    the argmax of step_fn's extra "attn" at each step (beam_search's "src_pos").
    """
    B, T = batch_size, max_steps
    seq = tf.zeros([B, T], tf.int32)
    logps = tf.zeros([B, T])
    done = tf.zeros([B], tf.bool)
    length = tf.zeros([B], tf.int32)

    src_pos = tf.zeros([B, T], tf.int32)

    def cond(step, ids, seq, logps, done, length, src_pos, state):
        return tf.logical_and(step < T, tf.logical_not(tf.reduce_all(done)))

    def body(step, ids, seq, logps, done, length, src_pos, state):
        log_probs, state, extras = step_fn(ids, step, state)
        log_probs = constrain(tf.cast(log_probs, tf.float32), seq, step, stop_id, min_steps,
                              unk_id, block_trigrams, repeat_exempt)
        if sample:
            token = tf.random.categorical(log_probs / temperature, 1, seed=seed,
                                          dtype=tf.int32)[:, 0]
        else:
            token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_logp = tf.gather(log_probs, token, batch_dims=1)
        here = tf.equal(tf.range(T), step)[None, :]
        live = ~done
        seq = tf.where(here & live[:, None], token[:, None], seq)
        logps = tf.where(here & live[:, None], token_logp[:, None], logps)
        if return_src_pos:
            pos = tf.argmax(extras["attn"], axis=-1, output_type=tf.int32)
            src_pos = tf.where(here & live[:, None], pos[:, None], src_pos)
        stopped = live & tf.equal(token, stop_id)
        length = tf.where(live & ~stopped, length + 1, length)
        done = done | stopped
        return step + 1, token, seq, logps, done, length, src_pos, state

    ids = tf.fill([B], start_id)
    _, _, seq, logps, done, length, src_pos, _ = tf.while_loop(
        cond, keep_shapes(body),
        (tf.constant(0), ids, seq, logps, done, length, src_pos, initial_state),
    )
    keep = tf.range(T)[None, :] < length[:, None]
    emitted = length + tf.cast(done, tf.int32)
    out = {"src_pos": tf.where(keep, src_pos, 0)} if return_src_pos else {}
    return {
        **out,
        "ids": tf.where(keep, seq, 0),
        "length": length,
        "step_log_probs": logps,
        "score": tf.reduce_sum(logps, axis=1) / length_norm(emitted, 0.0),
    }
