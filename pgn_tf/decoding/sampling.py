"""Ancestral sampling: the greedy loop drawing each token from the (tempered) distribution."""

from __future__ import annotations

from pgn_tf.decoding import greedy


def search(step_fn, initial_state, batch_size, max_steps, start_id: int, stop_id: int,
           temperature: float = 1.0, seed: int | None = None, **kwargs):
    """Same arguments and result as greedy.search; tokens are sampled instead of argmax'd."""
    return greedy.search(step_fn, initial_state, batch_size, max_steps, start_id, stop_id,
                         sample=True, temperature=temperature, seed=seed, **kwargs)
