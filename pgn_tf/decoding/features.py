"""Rush et al. (2015) section 5: ABS+ rescoring features and the extractive restriction, as a
wrapper around any step function of the search interface (the search stays unaware of them).

The beam then maximises s(y, x) = sum_i alpha^T f(y_{i+1}, x, y_c) with
    f = [ log p(y_{i+1} | x, y_c),
          1{exists j: y_{i+1} = x_j},                                         unigram
          1{exists j: y_{i+1-k} = x_{j-k} for k in {0, 1}},                   bigram
          1{exists j: y_{i+1-k} = x_{j-k} for k in {0, 1, 2}},                trigram
          1{exists k > j: y_i = x_k, y_{i+1} = x_j} ]                          reordering
alpha = (1, 0, 0, 0, 0) is plain ABS. `extractive` allows only article words (and [STOP]).
"""

from __future__ import annotations

import tensorflow as tf

from pgn_tf.decoding.beam_state import ARTICLE
from pgn_tf.decoding.constraints import NEG_INF

NUM_FEATURES = 5


def parse_weights(text: str) -> list[float] | None:
    """'1,0.5,0,0,-0.2' -> five floats; '' -> None (no rescoring)."""
    if not text.strip():
        return None
    try:
        weights = [float(x) for x in text.split(",")]
    except ValueError:
        weights = []
    if len(weights) != NUM_FEATURES:
        raise ValueError(f"decode.abs_plus_weights needs {NUM_FEATURES} comma-separated numbers "
                         f"(log p, unigram, bigram, trigram, reordering), got '{text}'")
    return weights


def _mark(src: tf.Tensor, select: tf.Tensor, width) -> tf.Tensor:
    """1.0 at every id src[n, j] with select[n, j]: float32 [N, width]."""
    select = select & (src >= 0) & (src < width)
    rows = tf.broadcast_to(tf.range(tf.shape(src)[0])[:, None], tf.shape(src))
    idx = tf.stack([tf.boolean_mask(rows, select), tf.boolean_mask(src, select)], axis=1)
    hits = tf.scatter_nd(idx, tf.ones([tf.shape(idx)[0]]), tf.stack([tf.shape(src)[0], width]))
    return tf.cast(hits > 0, tf.float32)


def match_features(src: tf.Tensor, prev1: tf.Tensor, prev2: tf.Tensor, width) -> list[tf.Tensor]:
    """The four indicator features for every candidate id.

    src: int32 [N, M] article ids (-1 at padding); prev1 = y_i, prev2 = y_{i-1}: int32 [N];
    width: the log-probs' width. Returns [unigram, bigram, trigram, reordering], each [N, width].
    """
    valid = src >= 0
    before1 = tf.pad(src[:, :-1], [[0, 0], [1, 0]], constant_values=-1)  # x_{j-1}
    before2 = tf.pad(src[:, :-2], [[0, 0], [2, 0]], constant_values=-1)  # x_{j-2}
    bigram = tf.equal(before1, prev1[:, None])
    trigram = bigram & tf.equal(before2, prev2[:, None])
    # Reordering: x_j with j before the last position k where x_k = y_i.
    positions = tf.range(tf.shape(src)[1])[None, :]
    at_prev = tf.equal(src, prev1[:, None])
    last_k = tf.reduce_max(tf.where(at_prev, positions, -1), axis=1)  # [N], -1 if none
    reorder = positions < last_k[:, None]
    return [_mark(src, valid, width), _mark(src, bigram, width), _mark(src, trigram, width),
            _mark(src, reorder, width)]


def rescoring_step_fn(step_fn, stop_id: int, weights=None, extractive: bool = False):
    """Wraps step_fn(ids, step, state); its state becomes {"inner": state, "prev": [N] (the
    token before `ids`), ARTICLE: {"src": int32 [N, M] article ids, -1 at padding}}, which
    `initial_state` builds (the article ids travel in the state so that the beam search can
    drop finished articles from the batch).

    weights: float [5] tensor or list (alpha), or None for log p alone."""

    def wrapped(ids, step, state):
        log_probs, inner, extras = step_fn(ids, step, state["inner"])
        width = tf.shape(log_probs)[1]
        feats = match_features(state[ARTICLE]["src"], tf.cast(ids, tf.int32), state["prev"],
                               width)
        scores = log_probs
        if weights is not None:
            w = tf.cast(weights, tf.float32)
            scores = w[0] * log_probs + tf.add_n([w[k + 1] * f for k, f in enumerate(feats)])
        if extractive:
            allowed = (feats[0] > 0) | tf.equal(tf.range(width), stop_id)[None, :]
            scores = tf.where(allowed, scores, NEG_INF)
        return scores, dict(state, inner=inner, prev=tf.cast(ids, tf.int32)), extras

    return wrapped


def initial_state(state, src_ids: tf.Tensor, pad_id: int):
    """src_ids: int32 [N, M], already tiled to the hypotheses."""
    return {"inner": state, "prev": tf.fill(tf.shape(src_ids)[:1], pad_id),
            ARTICLE: {"src": src_ids}}
