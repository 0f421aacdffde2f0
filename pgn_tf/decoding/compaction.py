"""Which articles the beam search goes on decoding once some have finished, and the gather that
keeps them (`BeamSearch.step`): finished articles leave the batch, so later steps run on fewer
rows. Plain, the batch shrinks to its live articles once they are at most `compact_below` of
it; with `row_buckets` (decode.jit_step) only to powers of two of articles, finished ones as
padding, so that a step compiled once a shape sees a few batch sizes.
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.decoding.beam_state import map_state


def next_power_of_two(n: tf.Tensor) -> tf.Tensor:
    """The smallest power of two >= n, int32 (1 for n <= 1): n - 1 with every bit below its
    highest set, plus one."""
    v = tf.maximum(tf.cast(n, tf.int32), 1) - 1
    for shift in (1, 2, 4, 8, 16):
        v = tf.bitwise.bitwise_or(v, tf.bitwise.right_shift(v, shift))
    return v + 1


def batch_after(done: tf.Tensor, compact_below: float, row_buckets: bool):
    """(shrink, size): whether the batch of articles `done` (bool [b]) shrinks after this step,
    and to how many articles (int32 scalars)."""
    b = tf.shape(done)[0]
    n_live = tf.reduce_sum(tf.cast(~done, tf.int32))
    if row_buckets:
        size = next_power_of_two(n_live)
        return (n_live > 0) & (size < b), size
    shrink = ((n_live > 0) & (n_live < b)
              & (tf.cast(n_live, tf.float32) <= compact_below * tf.cast(b, tf.float32)))
    return shrink, n_live


def kept_articles(done: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
    """The `size` articles kept (int32 [size]): the live ones first, in order, then finished
    ones as padding."""
    return tf.argsort(tf.cast(done, tf.int32), stable=True)[:size]


def compact(state, keep: tf.Tensor, beam_size: int):
    """Keeps the articles `keep` (int [m]) of every per-article and per-hypothesis tensor of a
    BeamState (a model state's ONCE tensors by article, its others by row); the results already
    written (`out`, [B, ...]) stay whole."""
    rows = tf.reshape(tf.cast(keep, tf.int32)[:, None] * beam_size + tf.range(beam_size), [-1])

    def article(t):
        return tf.gather(t, keep)

    def hyp(t):
        return tf.gather(t, rows)

    per_article = tf.nest.map_structure(article, state._replace(ids=(), model_state=(), out=()))
    return per_article._replace(ids=hyp(state.ids),
                                model_state=map_state(state.model_state, hyp, hyp,
                                                      on_once=article),
                                out=state.out)
