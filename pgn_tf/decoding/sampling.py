"""Ancestral sampling: greedy search drawing each token from the (tempered) distribution."""

from __future__ import annotations

from pgn_tf.decoding import greedy


def search(step_fn, initial_state, *, temperature: float = 1.0, seed: int | None = None,
           **kwargs) -> dict:
    """greedy.search's arguments (by name) and result; tokens are sampled instead of argmax'd."""
    return greedy.search(step_fn, initial_state, sample=True, temperature=temperature,
                         seed=seed, **kwargs)
