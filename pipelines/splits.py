"""The preprocessing pipeline's splits: by a hash of the example id (`--split
train=0.9,...`), or by CNN/DailyMail's url lists (`--split_files`), as partition functions."""

from __future__ import annotations

import hashlib

from apache_beam.io.filesystems import FileSystems

from pgn_tf.pipelines.portable import hash_fraction
from pgn_tf.utils.errors import UserError

# CNN/DM's url lists (See et al.'s cnn-dailymail repo) -> our split names.
URL_LISTS = {"all_train.txt": "train", "all_val.txt": "validation", "all_test.txt": "test"}


def parse_split(spec: str) -> list[tuple[str, float]]:
    """'train=0.9,validation=0.05,test=0.05' -> [(name, fraction)], fractions summing to 1."""
    parts = []
    for item in spec.split(","):
        name, eq, frac = item.partition("=")
        try:
            value = float(frac)
        except ValueError:
            value = -1.0
        if not eq or not name.strip() or value < 0:
            raise UserError(f"--split expects name=fraction,..., got '{spec}'")
        parts.append((name.strip(), value))
    total = sum(f for _, f in parts)
    if abs(total - 1.0) > 1e-6:
        raise UserError(f"--split fractions sum to {total:g}, not 1")
    if "train" not in dict(parts):
        raise UserError("--split needs a 'train' part (the vocab is built from it)")
    return parts


class HashSplit:
    """Assigns an example to a split by the hash of its id."""

    def __init__(self, parts: list[tuple[str, float]]):
        self.names = [n for n, _ in parts]
        self.shares = dict(parts)  # split -> expected share of the examples
        self.bounds, acc = [], 0.0
        for _, f in parts:
            acc += f
            self.bounds.append(acc)

    def __call__(self, item, num_partitions: int) -> int:
        x = hash_fraction(item[0].id)
        for i, b in enumerate(self.bounds):
            if x < b:
                return i
        return len(self.bounds) - 1


def read_url_lists(directory: str) -> dict[str, str]:
    """CNN/DM url lists -> {story id: split}. A story's file name is the sha1 hex of its URL
    (See et al.'s make_datafiles.py)."""
    mapping = {}
    for fname, split in URL_LISTS.items():
        path = FileSystems.join(directory, fname)
        if not FileSystems.exists(path):
            raise UserError(f"--split_files {directory} has no {fname}")
        with FileSystems.open(path) as f:
            for line in f.read().decode("utf-8").splitlines():
                if line.strip():
                    mapping[hashlib.sha1(line.strip().encode()).hexdigest()] = split
    return mapping


class UrlListSplit:
    """Assigns a story to the split whose url list names it; others go to a last 'unlisted'
    partition that is dropped (counted)."""

    def __init__(self, mapping: dict[str, str]):
        self.names = [*URL_LISTS.values()]
        self.mapping = mapping
        listed = list(mapping.values())
        self.shares = {n: listed.count(n) / max(1, len(listed)) for n in self.names}

    def __call__(self, item, num_partitions: int) -> int:
        split = self.mapping.get(item[0].id)
        return self.names.index(split) if split else len(self.names)
