"""Which articles share a model call, and the batch sizes one compiled call is traced for.

Articles are decoded in batches of similar length (sorted, answered in input order), so little
of a batch is padding and its articles finish close together; each batch is padded up to a
bucket (powers of two up to decode.batch_size), so the in-graph search is traced once a bucket.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def batch_buckets(max_batch: int) -> list[int]:
    """The batch sizes one compiled call is traced for: powers of two below max_batch, and
    max_batch itself (32 -> [1, 2, 4, 8, 16, 32]; 48 -> [1, 2, 4, 8, 16, 32, 48])."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


def length_key(article: str, cap: int) -> int:
    """Sort key of an article: its whitespace words, capped where the encoder cuts anyway."""
    return min(len(article.split()), cap)


def length_batches(lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """Indices of the articles, sorted by `lengths`, in batches of at most `size`."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for start in range(0, len(order), size):
        yield order[start : start + size]


class Buckets:
    """The padded batch sizes of one compiled call, remembering those already traced."""

    def __init__(self, max_batch: int):
        self.sizes = batch_buckets(max_batch)
        self.traced: set[int] = set()

    def pick(self, n: int) -> int:
        """The batch size n articles are padded to: the smallest bucket already traced that
        holds them (a trace costs seconds, a few padding rows milliseconds), else the smallest
        bucket that holds them (traced now)."""
        fits = [b for b in self.sizes if b >= n]
        traced = [b for b in fits if b in self.traced]
        size = traced[0] if traced else fits[0]
        self.traced.add(size)
        return size
