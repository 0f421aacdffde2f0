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
    return_stats: bool = False,
):
    """One hypothesis per article, B at once; the constraints are beam_search's (`constrain`).

    Returns dict: ids int32 [B, T] (0 after the end, [STOP] excluded), length int32 [B],
    step_log_probs float32 [B, T] (log p of each chosen token, [STOP] included, 0 after),
    score float32 [B] (the beam's score: summed log-prob over len(tokens) with [START] and
    [STOP] counted, as See et al.'s avg_log_prob); with return_src_pos, src_pos int32 [B, T]:
    the argmax of step_fn's extra "attn" at each step (beam_search's "src_pos"); with
    return_stats, entropy and p_gen float32 [B]: the mean over the emitted steps of the entropy
    (nats) of the distribution each token was chosen from, and of step_fn's extra "p_gen" (1
    when it has none); diagnostics, without gradient.
    """
    B, T = batch_size, max_steps
    seq = tf.zeros([B, T], tf.int32)
    logps = tf.zeros([B, T])
    done = tf.zeros([B], tf.bool)
    length = tf.zeros([B], tf.int32)

    src_pos = tf.zeros([B, T], tf.int32)
    stats = tf.zeros([B, 2])  # running sums of entropy and p_gen over the emitted steps

    def cond(step, ids, seq, logps, done, length, src_pos, stats, state):
        return tf.logical_and(step < T, tf.logical_not(tf.reduce_all(done)))

    def body(step, ids, seq, logps, done, length, src_pos, stats, state):
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
        if return_stats:
            lp = tf.stop_gradient(log_probs)
            entropy = -tf.reduce_sum(tf.math.multiply_no_nan(lp, tf.exp(lp)), axis=-1)
            p_gen = tf.stop_gradient(tf.cast(extras.get("p_gen", tf.ones([B])), tf.float32))
            stats += tf.where(live[:, None], tf.stack([entropy, p_gen], axis=1), 0.0)
        stopped = live & tf.equal(token, stop_id)
        length = tf.where(live & ~stopped, length + 1, length)
        done = done | stopped
        return step + 1, token, seq, logps, done, length, src_pos, stats, state

    ids = tf.fill([B], start_id)
    _, _, seq, logps, done, length, src_pos, stats, _ = tf.while_loop(
        cond, keep_shapes(body),
        (tf.constant(0), ids, seq, logps, done, length, src_pos, stats, initial_state),
    )
    keep = tf.range(T)[None, :] < length[:, None]
    emitted = length + tf.cast(done, tf.int32)
    out = {"src_pos": tf.where(keep, src_pos, 0)} if return_src_pos else {}
    if return_stats:
        mean = stats / tf.cast(tf.maximum(emitted, 1), tf.float32)[:, None]
        out.update(entropy=mean[:, 0], p_gen=mean[:, 1])
    return {
        **out,
        "ids": tf.where(keep, seq, 0),
        "length": length,
        "step_log_probs": logps,
        "score": tf.reduce_sum(logps, axis=1) / length_norm(emitted, 0.0),
    }
