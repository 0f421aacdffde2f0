"""Whether anything a version's loader will open leads out of the model's base path.

Version dirs are served only from inside --model_base_path, where stock TF Serving follows
whatever a version dir points to. Two ways lead out, and both are refused:

* The tree (`tree_leaves`): a version dir that is, or holds at any depth (variables/, assets/,
  assets.extra/, anything under it), a symbolic link leading out of the base path. It is never
  walked through that link; links that stay inside are followed and their contents checked.
* The asset names (`names_leave`): a SavedModel's meta graphs list their asset files
  (MetaGraphDef.asset_file_def, or a TF1 export's `saved_model_assets` collection), and the
  loader opens each as `<version>/assets/<filename>` (tf.saved_model.load for TF2 object graphs,
  loader_impl.get_asset_tensors for TF1 graphs). No link is involved, so the tree walk cannot
  see a filename that is an absolute path (`os.path.join` then drops the assets dir, on a
  gs:// base too) or climbs out with `..`. Every filename must be relative, free of `..`
  components (either separator), NUL characters and drive or UNC forms (`C:\\`, `\\\\host`),
  and, on a local base, resolve (os.path.realpath) inside the base path. The AssetFileDef's
  tensor_info names the graph tensor that is fed the joined path, not a file: nothing to check.

The file read is the one TF reads (loader_impl.parse_saved_model): saved_model.pb when it
exists, else saved_model.pbtxt (saved_model.cpb, the chunked form, is not read by the Python
loader). It is read bounded: a saved_model.pb larger than SAVED_MODEL_MAX_BYTES or a
saved_model.pbtxt larger than SAVED_MODEL_TEXT_MAX_BYTES is refused as too large to check, and
one that is not a regular file (a FIFO would block the loader and the check) is refused too. One
that cannot be read or parsed when the poller lists the versions is left to the loader, which
reads it with the same parser and fails on it; once a version has loaded it must parse, or the
version is not served (the check fails closed).

Both checks run when the poller lists the versions and again once a version has loaded and
replayed its warm-up, before it serves, so a link or a rewritten saved_model.pb swapped in
during the load is caught. Not caught: a change made and undone again within one load, hard
links and bind mounts (the loader opens paths, and TensorFlow offers no load from descriptors
opened inside the base), and a path the export's graph computes or holds as a constant (a
tf.io.read_file of a fixed path runs what the export's code says). A base path that is no local
dir (gs://...) has no links: only its asset names are checked, and by name alone.
"""

from __future__ import annotations

import os
import re
import stat

import tensorflow as tf
from google.protobuf import message, text_format
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from pgn_tf.serving.status import echo

TREE_MAX_ENTRIES = 10_000  # entries of one version tree checked at most; more: not served

# A SavedModel keeps its weights in variables/ (tf.saved_model.save, pgn_tf.export), so its
# saved_model.pb holds graphs and signatures, a few MB for the pointer-generator. 256 MiB leaves
# room for graphs with large constants folded in, and bounds what one check holds: the file's
# bytes and the parsed message, a small multiple of the file. (Protobuf itself stops at 2 GiB.)
SAVED_MODEL_MAX_BYTES = 256 * 2**20
# The text form is parsed by protobuf's pure-Python text parser, far slower than the binary one,
# and tf.saved_model.save never writes it: a lower cap keeps a poll that checks it short.
SAVED_MODEL_TEXT_MAX_BYTES = 16 * 2**20

_PB, _PBTXT = "saved_model.pb", "saved_model.pbtxt"
_ASSETS_KEY = "saved_model_assets"  # TF1 exports list asset files in this collection
_DRIVE = re.compile(r"[A-Za-z]:")  # C:\x, C:x


def is_local(path: str) -> bool:
    return "://" not in path


def inside(real: str, base_real: str) -> bool:
    return os.path.commonpath([real, base_real]) == base_real


def tree_leaves(path: str, base_real: str) -> str | None:
    """Why a local version dir leads out of the model's base path, in words for a log line
    (the dir itself, or the first link found at any depth below it, or a tree of more than
    TREE_MAX_ENTRIES entries, too many to check); None when everything in it resolves
    (os.path.realpath) inside. The loader opens every file of the tree (saved_model.pb,
    fingerprint.pb, variables/, assets/, assets.extra/ warm-up requests), so every entry is
    checked, and a link to a dir inside is followed and its contents checked as well. A link
    leading out is never followed, and a dir reached twice (a link loop) is walked once."""
    real = os.path.realpath(path)
    if not inside(real, base_real):
        return "it is a symbolic link that leads out of the base path"
    stack, seen, count = [(path, real)], {real}, 0
    while stack:
        top, top_real = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue  # unreadable: the load fails on its own, and reads nothing outside
        for e in entries:
            count += 1
            if count > TREE_MAX_ENTRIES:
                return (f"it holds more than {TREE_MAX_ENTRIES} entries (a SavedModel has a "
                        "handful), too many to check that none leads out of the base path")
            try:
                link = e.is_symlink()
                real = os.path.realpath(e.path) if link else os.path.join(top_real, e.name)
                if link and not inside(real, base_real):
                    return (f"its entry {os.path.relpath(e.path, path)!r} is a symbolic link "
                            "that leads out of the base path")
                is_dir = os.path.isdir(real) if link else e.is_dir(follow_symlinks=False)
            except (OSError, ValueError):
                continue  # gone since the listing: nothing there to open
            if is_dir and real not in seen:
                seen.add(real)
                stack.append((e.path, real))
    return None


def asset_name_problem(name: str) -> str | None:
    """What makes an asset filename lead out of `<version>/assets/` by its name alone (the
    loader joins the two with os.path.join), or None."""
    if "\x00" in name:
        return "it holds a NUL character"
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        return "it is an absolute path"
    if _DRIVE.match(name):
        return "it names a drive"
    if ".." in re.split(r"[/\\]", name):
        return "it has a '..' component"
    return None


def asset_filenames(sm: saved_model_pb2.SavedModel) -> list[str]:
    """Every asset filename the meta graphs of `sm` list: their asset_file_def, and the
    AssetFileDefs of a TF1 export's assets collection (read when asset_file_def is empty)."""
    out = []
    for mg in sm.meta_graphs:
        out.extend(a.filename for a in mg.asset_file_def)
        if _ASSETS_KEY in mg.collection_def:
            for packed in mg.collection_def[_ASSETS_KEY].any_list.value:
                a = meta_graph_pb2.AssetFileDef()
                if packed.Unpack(a):
                    out.append(a.filename)
    return out


def names_leave(name: str, filenames: list[str], path: str,
                base_real: str | None) -> str | None:
    """Why one of `filenames`, the asset files that version dir `path`'s `name`
    (saved_model.pb) lists, leads out of the base path (base_real: its realpath, None on a
    remote store, where names alone are checked), or None."""
    assets = os.path.join(path, "assets")
    for filename in filenames:
        problem = asset_name_problem(filename)
        if problem is None and base_real is not None:
            if not inside(os.path.realpath(os.path.join(assets, filename)), base_real):
                problem = "it resolves outside"
        if problem is not None:
            return (f"its {name} names the asset file {echo(filename)!r}, which leads out of "
                    f"the base path ({problem}; the loader opens assets/<filename>)")
    return None


_TOO_LARGE = "is too large"


def _read_local(path: str, limit: int, known: tuple | None) -> tuple[tuple, bytes | str | None]:
    """(identity of the file, its first limit + 1 bytes); (identity, None) when the identity
    is `known`; (identity, why it is not read). O_NONBLOCK: a FIFO does not block the open
    (the loader would block on it: it is refused as not a regular file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key == known:
            return key, None
        if not stat.S_ISREG(st.st_mode):
            return key, "is not a regular file"
        if st.st_size > limit:
            return key, _TOO_LARGE
        return key, f.read(limit + 1)


def _read_remote(path: str, limit: int, known: tuple | None) -> tuple[tuple, bytes | str | None]:
    """_read_local on a store tf.io.gfile reads (no inode there: the size and the time)."""
    st = tf.io.gfile.stat(path)
    key = (st.length, st.mtime_nsec)
    if key == known:
        return key, None
    if st.length > limit:
        return key, _TOO_LARGE
    with tf.io.gfile.GFile(path, "rb") as f:
        return key, f.read(limit + 1)


def _parse(data: bytes, text: bool) -> saved_model_pb2.SavedModel:
    sm = saved_model_pb2.SavedModel()
    if text:
        text_format.Parse(data.decode("utf-8"), sm)
    else:
        sm.ParseFromString(data)
    return sm


class Containment:
    """The containment check of one model's base path: `leads_out(d)` says why version dir `d`
    leads out of it, or None. A version's asset check is kept with the identity of the file it
    read (device, inode, size and times; on a remote store its size and time), so a poll parses
    a saved_model.pb again only once it has changed; the check after a load always reads it."""

    def __init__(self, base_path: str):
        self.base_path = base_path
        self._assets: dict[str, tuple[tuple, str | None]] = {}  # dir -> (identity, why)

    def leads_out(self, d: str, loaded: bool = False) -> str | None:
        """Why version dir `d` (a name under the base path) leads out of it, in words for a log
        line, or None. loaded: the version has loaded, so a saved_model.pb that cannot be read
        or parsed is refused (while the versions are listed it is left to the loader)."""
        path = os.path.join(self.base_path, d)
        base_real = None
        if is_local(self.base_path):
            base_real = os.path.realpath(self.base_path)
            why = tree_leaves(path, base_real)  # first: no file is read through a link out
            if why is not None:
                return why
        return self._assets_leave(d, path, base_real, loaded)

    def retain(self, names) -> None:
        """Forgets the asset checks of version dirs not in `names` (the dirs listed now)."""
        for d in set(self._assets) - set(names):
            del self._assets[d]

    def _assets_leave(self, d: str, path: str, base_real: str | None,
                      loaded: bool) -> str | None:
        exists = os.path.exists if base_real is not None else tf.io.gfile.exists
        try:
            name = next((n for n in (_PB, _PBTXT) if exists(os.path.join(path, n))), None)
        except (OSError, tf.errors.OpError) as e:
            return self._unread(d, loaded, f"it cannot be listed ({type(e).__name__})")
        if name is None:
            return self._unread(d, loaded, f"it holds neither {_PB} nor {_PBTXT}")
        text = name == _PBTXT
        limit = SAVED_MODEL_TEXT_MAX_BYTES if text else SAVED_MODEL_MAX_BYTES
        cached = None if loaded else self._assets.get(d)
        known = cached[0][1:] if cached is not None and cached[0][0] == name else None
        read = _read_local if base_real is not None else _read_remote
        try:
            key, data = read(os.path.join(path, name), limit, known)
        except (OSError, tf.errors.OpError) as e:
            return self._unread(d, loaded, f"its {name} cannot be read ({type(e).__name__})")
        if data is None:
            return cached[1]  # the file it was checked in, unchanged
        if isinstance(data, bytes) and len(data) > limit:
            data = _TOO_LARGE  # it grew after its size was read
        if isinstance(data, str):
            size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
            why = (f"its {name} is larger than {size}, too large to check that no asset file "
                   "it names leads out of the base path" if data == _TOO_LARGE else
                   f"its {name} {data}")
        else:
            try:
                sm = _parse(data, text)
            except (message.DecodeError, text_format.ParseError, UnicodeDecodeError,
                    ValueError, RecursionError) as e:
                self._assets[d] = ((name, *key), None)  # not parsed again until it changes
                return self._unread(d, loaded, f"its {name} does not parse ({type(e).__name__})",
                                    forget=False)
            finally:
                del data
            why = names_leave(name, asset_filenames(sm), path, base_real)
        self._assets[d] = ((name, *key), why)
        return why

    def _unread(self, d: str, loaded: bool, why: str, forget: bool = True) -> str | None:
        """A SavedModel file that cannot be read or parsed: left to the loader (which reads it
        with the same parser and fails on it) while the versions are listed; refused once the
        version has loaded. forget: drop what was kept of the dir's last check."""
        if forget:
            self._assets.pop(d, None)
        if not loaded:
            return None
        return (f"{why} after the load, so it is not known whether an asset file it names "
                "leads out of the base path")
