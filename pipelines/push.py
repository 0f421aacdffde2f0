"""Publishing a SavedModel to a serving base, as the pipeline's push step does: a new version
directory that no server can see half-written, once per push id (pgn_tf.pipelines.run)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time

from pgn_tf.utils import durable

PUSHED_BY = os.path.join("assets.extra", "pushed_by.json")  # in a pushed version dir


def served_versions(serving_base: str) -> list[int]:
    if not os.path.isdir(serving_base):
        return []
    return sorted(int(d) for d in os.listdir(serving_base) if d.isdigit())


def pushed_version(serving_base: str, push_id: str) -> int | None:
    """The version a push with this id already published, if any (read from each version's
    assets.extra/pushed_by.json)."""
    for version in reversed(served_versions(serving_base)):
        try:
            with open(os.path.join(serving_base, str(version), PUSHED_BY)) as f:
                if json.load(f).get("push_id") == push_id:
                    return version
        except (OSError, ValueError):
            continue
    return None


def push(saved_model: str, serving_base: str, push_id: str) -> tuple[int, str, bool]:
    """Publishes a SavedModel as serving_base/<highest + 1>/, once per push_id.

    Copied under a dot-name on the same file system, marked with push_id, fsynced, then
    renamed (atomic) and the directory fsynced. If a version already carries push_id (an
    earlier attempt was killed after its rename), that version is returned instead.
    Returns (version, path, already pushed)."""
    os.makedirs(serving_base, exist_ok=True)
    done = pushed_version(serving_base, push_id)
    if done is not None:
        return done, os.path.join(serving_base, str(done)), True
    # .push-<pid>-<ms>-<host>: clean_leftovers removes it once that process is gone.
    tmp = os.path.join(serving_base, f".push-{os.getpid()}-{int(time.time() * 1000)}-"
                                     f"{socket.gethostname()}")
    try:
        shutil.copytree(saved_model, tmp)
        os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
        with open(os.path.join(tmp, PUSHED_BY), "w") as f:
            json.dump({"push_id": push_id, "saved_model": os.path.abspath(saved_model),
                       "pid": os.getpid(), "host": socket.gethostname(),
                       "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}, f, indent=2)
        durable.fsync_tree(tmp)
        while True:  # another pusher may take a number first; rename never overwrites a dir
            versions = served_versions(serving_base)
            version = (versions[-1] + 1) if versions else 1
            final = os.path.join(serving_base, str(version))
            try:
                publish(tmp, final)
            except OSError:
                if not os.path.exists(final):
                    raise
                continue
            durable.fsync_dir(serving_base)
            return version, final, False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after a rename; a failed copy's remains


def publish(tmp: str, final: str) -> None:
    """The rename that makes a pushed version visible to servers."""
    os.rename(tmp, final)
