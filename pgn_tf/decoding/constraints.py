"""What a search may not emit, shared by beam, greedy and sampling search: one frozen value,
passed by name (`constraints=Constraints(stop_id, min_steps=...)`), never a positional list.

The bans are column updates (`Constraints.ban_entries`): (row, column) pairs with NEG_INF
(banned) or NO_BAN (left as it is), at most n * (2 + 2T) of them, never a full-width mask; a
dense distribution takes them by one scatter (`Constraints.apply`), a pointer model's Mixture
reads them in parts (decoding.mixture).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

NEG_INF = -1e9
NO_BAN = 3e38  # a column update value that leaves a log-probability as it is (min(x, 3e38))


@dataclasses.dataclass(frozen=True)
class Constraints:
    """The decoding constraints.

    Args:
      stop_id: the [STOP] id; impossible before min_steps.
      min_steps: int or int32 scalar: the fewest tokens before [STOP].
      unk_id: if set, [UNK] is never emitted (there is always an alternative).
      block_trigrams: Paulus et al. (2017): a token that would repeat a trigram already in the
        hypothesis gets probability 0.
      repeat_exempt: bool [V] (V <= W; ids >= V count as words) or None: a hypothesis may not
        emit a token it already emitted unless exempt (the repeated-word block; inference.py
        builds it from the vocabulary).
    """

    stop_id: int
    min_steps: Any = 0
    unk_id: int | None = None
    block_trigrams: bool = False
    repeat_exempt: Any = None

    def ban_entries(self, n, seq: tf.Tensor, step: tf.Tensor,
                    dtype=tf.float32) -> tuple[tf.Tensor, tf.Tensor]:
        """The bans of n rows as column updates: (idx int32 [U, 2] of (row, column), values
        [U], each NEG_INF or NO_BAN). seq: int32 [n, T] tokens so far (positions < step are
        valid)."""
        t = tf.shape(seq)[1]
        neg = tf.constant(NEG_INF, dtype)
        keep = tf.constant(NO_BAN, dtype)
        rows = tf.range(n)
        per_row = tf.ones_like(rows)
        # (rows, cols, values) blocks, each [n * m]
        blocks = [(rows, self.stop_id * per_row,
                   tf.fill([n], tf.where(step < self.min_steps, neg, keep)))]
        if self.unk_id is not None:
            blocks.append((rows, self.unk_id * per_row, tf.fill([n], neg)))
        if self.block_trigrams:
            last2 = tf.gather(seq, tf.maximum(step - 2, 0), axis=1)  # [n]
            last1 = tf.gather(seq, tf.maximum(step - 1, 0), axis=1)
            j = tf.range(t - 2)  # a trigram (seq[j], seq[j+1], seq[j+2]) fully emitted: j+2 < step
            match = (
                tf.equal(seq[:, :-2], last2[:, None])
                & tf.equal(seq[:, 1:-1], last1[:, None])
                & (j[None, :] + 2 < step)
                & (step >= 2)
            )  # [n, T-2]
            blocks.append((tf.repeat(rows, t - 2), tf.reshape(seq[:, 2:], [-1]),
                           tf.reshape(tf.where(match, neg, keep), [-1])))
        if self.repeat_exempt is not None:
            exempt = tf.convert_to_tensor(self.repeat_exempt, tf.bool)
            v = tf.shape(exempt)[0]
            is_exempt = tf.gather(exempt, tf.minimum(seq, v - 1)) & (seq < v)  # [n, T]
            emitted = tf.range(t)[None, :] < step
            blocks.append((tf.repeat(rows, t), tf.reshape(seq, [-1]),
                           tf.reshape(tf.where(emitted & ~is_exempt, neg, keep), [-1])))
        idx = tf.stack([tf.concat([b[0] for b in blocks], 0),
                        tf.concat([b[1] for b in blocks], 0)], axis=1)  # [U, 2]
        return idx, tf.concat([b[2] for b in blocks], 0)

    def apply(self, log_probs: tf.Tensor, seq: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """log_probs float [n, W] with the banned entries at min(log p, -1e9), by one scatter of
        the column updates."""
        idx, values = self.ban_entries(tf.shape(log_probs)[0], seq, step, dtype=log_probs.dtype)
        return tf.tensor_scatter_nd_min(log_probs, idx, values)
