"""The search's per-hypothesis state, as one nest (STYLE habit 6): which tensors follow a
hypothesis, which are an article's (the same for its K beams) and which the batch's, and the
helpers that tile, reorder and re-join them (OpenNMT-tf's `_reorder_state`). Beam search,
the objectives' sampling and the summarizer all hold their state this way.
"""

from __future__ import annotations

import tensorflow as tf

SHARED = "shared"  # a dict key whose tensors are the same for every hypothesis: never tiled
ARTICLE = "per_article"  # a dict key whose tensors are the same for an article's K beams
# A dict key whose tensors an article holds once, [b, ...], not tiled to its K beams: the step
# broadcasts them over the beams itself (the pointer-generator's encoder outputs, the largest
# tensors of a search); compaction gathers them by article, reordering leaves them alone.
ONCE = "once"


# the per-step extras a search may carry with its hypotheses (return_extras)
EXTRAS = ("attn", "p_gen", "src_pos")


def wanted_extras(return_extras) -> tuple[str, ...]:
    if return_extras is True:
        return ("attn", "p_gen")
    if not return_extras:
        return ()
    unknown = set(return_extras) - set(EXTRAS)
    if unknown:
        raise ValueError(f"return_extras: unknown {sorted(unknown)}, choose from {EXTRAS}")
    return tuple(return_extras)


def map_state(state, on_hyp, on_article, on_other=None, on_once=None):
    """Applies on_hyp to every per-hypothesis tensor of a nest, on_article to those under an
    ARTICLE key, on_once to those under a ONCE key and on_other (default: identity) to SHARED
    tensors and scalars; on_once defaults to on_other."""
    on_other = on_other or (lambda t: t)
    on_once = on_once or on_other

    def walk(x, in_article, shared, once):
        if isinstance(x, dict):
            return {k: walk(v, in_article or k == ARTICLE, shared or k == SHARED,
                            once or k == ONCE) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, in_article, shared, once) for v in x)
        if shared or x.shape.rank == 0:
            return on_other(x)
        if once:
            return on_once(x)
        return on_article(x) if in_article else on_hyp(x)

    return walk(state, False, False, False)


def reorder_state(state, flat_indices: tf.Tensor):
    """Gathers every per-hypothesis tensor of a nested state (OpenNMT-tf `_reorder_state`);
    per-article (ARTICLE) tensors are the same for an article's beams and stay as they are."""
    return map_state(state, lambda t: tf.gather(t, flat_indices), lambda t: t)


def tile_beams(nest, beam_size):
    """[B, ...] -> [B*K, ...] for every tensor of rank >= 1 (each row repeated K times), except
    under a dict key "shared" (per-batch tensors such as a tied output matrix) or "once"."""

    def tile(t):
        return tf.repeat(t, beam_size, axis=0)

    return map_state(nest, tile, tile)


def with_article(state, source):
    """`state` with its ARTICLE tensors taken from `source` (a nest of the same structure)."""

    def walk(x, y, in_article):
        if isinstance(x, dict):
            return {k: walk(v, y[k], in_article or k == ARTICLE) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, w, in_article) for v, w in zip(x, y))
        return y if in_article else x

    return walk(state, source, False)
