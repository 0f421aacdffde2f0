"""Writes that survive a crash: fsync what is about to be published, then rename it.

A rename is atomic, but without an fsync first a crash (power, kernel) can leave the new name
pointing at empty or partial files; and until the directory is fsynced the rename itself may
be lost. So: write under a temporary name, `fsync_tree` / fsync the file, rename, `fsync_dir`.
Paths with a scheme (gs://, s3://) have no fsync: their object stores publish on close.
"""

from __future__ import annotations

import json
import os


def _local(path: str) -> bool:
    return "://" not in path


def fsync_file(path: str) -> None:
    if _local(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: str) -> None:
    """Makes the directory's entries (files created, renamed or removed in it) durable."""
    if not _local(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; nothing more can be done there
    finally:
        os.close(fd)


def fsync_tree(root: str) -> None:
    """fsync every file and directory under root (root included), deepest first."""
    if not _local(root):
        return
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                fsync_file(path)
        fsync_dir(dirpath)


def write_json(path: str, obj, **dump_kwargs) -> None:
    """Writes JSON to `path` atomically and durably (temp file, fsync, rename, fsync dir)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, **dump_kwargs)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")
