"""Greedy (and, via sampling.py, ancestral-sampling) decoding against the search interface.

Returns per-step log-probabilities of the chosen tokens too, which the self-critical RL
objective (Paulus et al. 2017) needs for its sampled sequence.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.decoding.beam_search import constrain, keep_shapes


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
):
    """One hypothesis per article, B at once.

    Returns dict: ids int32 [B, T] (0 after the end, [STOP] excluded), length int32 [B],
    step_log_probs float32 [B, T] (log p of each chosen token, [STOP] included, 0 after),
    score float32 [B] (average log-prob over the emitted tokens and [STOP]).
    """
    B, T = batch_size, max_steps
    seq = tf.zeros([B, T], tf.int32)
    logps = tf.zeros([B, T])
    done = tf.zeros([B], tf.bool)
    length = tf.zeros([B], tf.int32)

    def cond(step, ids, seq, logps, done, length, state):
        return tf.logical_and(step < T, tf.logical_not(tf.reduce_all(done)))

    def body(step, ids, seq, logps, done, length, state):
        log_probs, state, _ = step_fn(ids, step, state)
        log_probs = constrain(tf.cast(log_probs, tf.float32), seq, step, stop_id, min_steps,
                              unk_id, block_trigrams)
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
        stopped = live & tf.equal(token, stop_id)
        length = tf.where(live & ~stopped, length + 1, length)
        done = done | stopped
        return step + 1, token, seq, logps, done, length, state

    ids = tf.fill([B], start_id)
    _, _, seq, logps, done, length, _ = tf.while_loop(
        cond, keep_shapes(body), (tf.constant(0), ids, seq, logps, done, length, initial_state)
    )
    keep = tf.range(T)[None, :] < length[:, None]
    n_scored = tf.cast(length + tf.cast(done, tf.int32), tf.float32)
    return {
        "ids": tf.where(keep, seq, 0),
        "length": length,
        "step_log_probs": logps,
        "score": tf.math.divide_no_nan(tf.reduce_sum(logps, axis=1), n_scored),
    }
