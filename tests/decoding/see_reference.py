"""A plain-Python beam search for ONE article, written from the description of See et al.'s
released decoder (abisee/pointer-generator `beam_search.py`), to check the batched in-graph
search against: hypotheses are Python lists, candidates are sorted with `sorted`, and every
constraint is re-implemented here rather than taken from pgn_tf.

The step function is the search interface, called eagerly on the article's K rows.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pgn_tf.decoding.beam_state import ARTICLE, SHARED

f32 = np.float32


def _gather_rows(state, rows):
    def walk(x, fixed):
        if isinstance(x, dict):
            return {k: walk(v, fixed or k in (SHARED, ARTICLE)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, fixed) for v in x)
        if fixed or x.shape.rank == 0:
            return x
        return tf.gather(x, rows)

    return walk(state, False)


def _cov_penalty(cov, beta):
    if beta <= 0:
        return f32(0)
    used = cov > 0
    return f32(beta) * np.sum(np.log(np.minimum(cov[used], f32(1))), dtype=f32)


def _banned(tokens, w, step, stop, min_steps, unk_id, block_trigrams, exempt):
    if w == stop and step < min_steps:
        return True
    if unk_id is not None and w == unk_id:
        return True
    if block_trigrams and len(tokens) >= 2:
        tri = (tokens[-2], tokens[-1], w)
        if any(tuple(tokens[j : j + 3]) == tri for j in range(len(tokens) - 2)):
            return True
    if exempt is not None and w in tokens:
        if not (w < len(exempt) and exempt[w]):
            return True
    return False


def _norm(emitted, alpha):
    """The divisor of a summed log-probability: len(tokens) with [START] (See et al.'s
    avg_log_prob) or, alpha > 0, GNMT's ((5 + |Y|) / 6)^alpha; emitted: tokens after [START]."""
    if alpha > 0:
        return np.power(f32((5 + emitted) / 6), f32(alpha), dtype=f32)
    return f32(emitted + 1)


def see_beam_search(step_fn, state, beam_size, max_steps, start_id, stop_id, min_steps=0,
                    coverage_penalty=0.0, unk_id=None, block_trigrams=False, exempt=None,
                    recombine_window=0, length_penalty=0.0):
    """One article; state: nest of [K, ...] (the article's state repeated K times).

    Returns (tokens before [STOP], score): the best result by See et al.'s avg_log_prob
    (summed log p over len(tokens) with [START] and [STOP]; GNMT's length penalty instead with
    length_penalty > 0) plus GNMT's coverage penalty."""
    K = beam_size
    hyps = [{"tokens": [], "logp": f32(0), "row": 0, "cov": None}]
    results = []
    for step in range(max_steps):
        rows = [h["row"] for h in hyps] + [0] * (K - len(hyps))
        ids = [h["tokens"][-1] if h["tokens"] else start_id for h in hyps]
        ids += [start_id] * (K - len(ids))
        log_probs, state, extras = step_fn(tf.constant(ids, tf.int32), tf.constant(step),
                                           _gather_rows(state, tf.constant(rows)))
        log_probs = log_probs.numpy().astype(f32)
        attn = extras["attn"].numpy().astype(f32) if coverage_penalty > 0 else None
        cands = []
        for i, h in enumerate(hyps):
            for w in range(log_probs.shape[1]):
                if not _banned(h["tokens"], w, step, stop_id, min_steps, unk_id,
                               block_trigrams, exempt):
                    cands.append((f32(h["logp"] + log_probs[i, w]), i, w))
        cands.sort(key=lambda c: -c[0])  # stable: ties keep (beam, token) order, as top_k
        new_hyps, windows = [], set()
        for score, i, w in cands:
            h = hyps[i]
            cov = None
            if attn is not None:
                cov = (h["cov"] if h["cov"] is not None else 0) + attn[i]
            tokens = h["tokens"] + [w]
            if w == stop_id:
                norm = score / _norm(len(h["tokens"]) + 1, length_penalty)  # with [STOP]
                results.append((norm + _cov_penalty(cov, coverage_penalty), h["tokens"]))
            else:
                if recombine_window:
                    window = tuple(tokens[-recombine_window:])
                    if window in windows:
                        continue
                    windows.add(window)
                new_hyps.append({"tokens": tokens, "logp": score, "row": i, "cov": cov})
            if len(new_hyps) == K or len(results) == K:
                break
        hyps = new_hyps
        if len(results) >= K:
            break
    if not results:
        results = [(f32(h["logp"] / _norm(len(h["tokens"]), length_penalty))
                    + (_cov_penalty(h["cov"], coverage_penalty) if h["cov"] is not None
                       else f32(0)), h["tokens"]) for h in hyps]
    best = max(range(len(results)), key=lambda r: results[r][0])
    return results[best][1], float(results[best][0])
