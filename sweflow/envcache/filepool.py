"""The store's file pool: every distinct file once, hard-linked into the layers that hold it.

Instances of one repository differ in a few files per commit, and the environments of its
versions share most packages; as whole trees each layer would store them all again. At commit,
each file of a new layer becomes a hard link to its pool entry (or the entry itself, when it is
the first of its kind), so a layer costs only the files no other layer has. Layers stay plain
directories: overlayfs mounts them as before, and a sandbox that writes a file copies it up
into its own upper, never into the pool.

Layout: ``pool/<kk>/<key>`` (``<key>~<n>`` for the n+1-th identical file of one layer). The
key is the file's sha256, permission bits and owner (links share one inode, so they share
those), and its mtime where something checks it: a file a git work tree's index tracks (the
index matches files by mtime and size; a checkout's files all have one mtime, so the instances
of a repository still share them) and a Python source with a timestamp-checked ``.pyc`` beside
it (valid for that mtime only). Any other file takes the mtime of the first of its kind: what an
install built in the work tree (compiled extensions, generated sources; the index does not know
them), the git objects, the packages of an environment. An entry that no layer links any more
(the pool's own names are all its links) is garbage: ``prune`` removes it, under gc's
exclusive lock.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

_PYC_HASH_BASED_FROM = 3390  # the first magic number (3.7) whose header has the flags word


class Pooled(BaseModel):
    """What pooling a tree did: files not yet on their entry, files now sharing an entry
    another layer made, and the bytes of the copies that sharing gave back."""

    files: int = 0
    shared: int = 0
    shared_bytes: int = 0

    def add(self, other: Pooled) -> None:
        self.files += other.files
        self.shared += other.shared
        self.shared_bytes += other.shared_bytes


def pool_tree(
    root: Path,
    pool: Path,
    files: dict[bytes, bytes],
    linked: frozenset[tuple[int, int]] = frozenset(),
) -> Pooled:
    """Link each of ``files`` (path relative to ``root``, as ``b"/a/b"`` -> its sha256 hex)
    to its pool entry. ``root`` and ``pool`` must be on one filesystem.

    A layer's tree keeps no two paths on one inode: a layer's digest records its hard links
    (``treedigest``), and a layer sent to another node as a tar must arrive with the digest it
    left with. So the n-th identical file of a layer takes the n-th entry of its key
    (``KEY~1`` for the second): the two copies of a figure every checkout of a repository holds
    are then stored twice in all, not twice per instance. ``linked`` are the inodes the tree
    already holds more than one link to (its files pooled before), which a file of it must not
    join either. A file pooled before under another key (the key's rule changed since, or it
    took another ordinal) moves to its entry now; the entry it leaves is garbage for
    :func:`prune` once no layer links it."""
    base = os.fsencode(root)
    done = Pooled()
    stamps = _TimestampedSources()
    work_trees = {rel.partition(b"/.git/")[0] + b"/" for rel in files if b"/.git/" in rel}
    tracked = _tracked_files(base, work_trees)
    taken: dict[bytes, int] = {}  # key -> entries of it this layer holds
    for rel, sha in files.items():
        path = base + rel
        st = os.lstat(path)
        key = b"%s-%o-%d-%d" % (sha, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
        if tracked(rel) or stamps.needs_mtime(path):
            key += b"-t%d" % int(st.st_mtime)
        nth = taken.get(key, 0)
        taken[key] = nth + 1
        name = b"%s~%d" % (key, nth) if nth else key
        entry = os.fsencode(pool) + b"/" + key[:2] + b"/" + name
        pooled = st.st_nlink > 1  # the tree links it once: the other link is a pool entry
        # at commit nothing is pooled or linked yet: no stat per file
        where = _inode(entry) if pooled or linked else None
        if pooled and where == (st.st_dev, st.st_ino):
            continue  # on its entry already
        done.files += 1
        if where in linked:
            continue
        if _link_into(path, entry):
            done.shared += 1
            if not pooled:  # a copy no other path held: its bytes go now (a pooled file's
                done.shared_bytes += st.st_size  # when prune takes the entry it left)
    return done


def _tracked_files(base: bytes, work_trees: set[bytes]) -> Callable[[bytes], bool]:
    """Whether a path (relative to ``base``) is a file the index of its work tree tracks. A
    work tree whose index git cannot list counts as tracking every file under it."""
    listed: set[bytes] = set()
    unlisted: list[bytes] = []
    for tree in work_trees:
        found = subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", base + tree, "ls-files", "-z"],
            capture_output=True,
        )
        if found.returncode != 0:
            unlisted.append(tree)
            continue
        listed.update(tree + name for name in found.stdout.split(b"\0") if name)
    prefixes = tuple(unlisted)  # startswith(()) is False: nothing unlisted, nothing matched
    return lambda rel: rel in listed or rel.startswith(prefixes)


def _inode(path: bytes) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def prune(pool: Path) -> tuple[int, int]:
    """Remove the entries no layer links any more; (entries, bytes) removed. An inode may have
    several entries (a file pooled again under another key keeps its old one), so an entry is
    garbage when its inode has no link but the pool's. Only under the store's exclusive lock: a
    commit could be about to link one."""
    names: dict[tuple[int, int], tuple[os.stat_result, list[Path]]] = {}
    for folder in pool.iterdir():
        for entry in folder.iterdir():
            st = entry.lstat()
            names.setdefault((st.st_dev, st.st_ino), (st, []))[1].append(entry)
    removed = freed = 0
    for st, entries in names.values():
        if st.st_nlink == len(entries):
            for entry in entries:
                entry.unlink()
            removed += len(entries)
            freed += st.st_size
    return removed, freed


def _link_into(path: bytes, entry: bytes) -> bool:
    """Make ``path`` share ``entry``'s inode; True when the entry was there already. The first
    file of its kind becomes the entry; a file whose entry is at the link limit stays a copy."""
    try:
        os.link(path, entry)
        return False
    except FileNotFoundError:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        return _link_into(path, entry)
    except FileExistsError:
        pass
    staged = path + b".sweflow-pool"
    try:
        os.link(entry, staged)
    except OSError as exc:
        if exc.errno == errno.EMLINK:
            return False
        raise
    os.replace(staged, path)
    return True


class _TimestampedSources:
    """Which ``.py`` files have a ``.pyc`` that checks the source's mtime (``__pycache__`` per
    PEP 3147, or a legacy ``x.pyc`` beside ``x.py``); folders are listed once each."""

    def __init__(self) -> None:
        self._caches: dict[bytes, list[bytes]] = {}

    def needs_mtime(self, path: bytes) -> bool:
        if not path.endswith(b".py"):
            return False
        folder, name = os.path.split(path)
        stem = name[:-3]
        legacy = folder + b"/" + stem + b".pyc"
        cache = folder + b"/__pycache__"
        candidates = [cache + b"/" + n for n in self._listing(cache) if n.startswith(stem + b".")]
        return any(_checks_mtime(pyc) for pyc in [legacy, *candidates] if pyc.endswith(b".pyc"))

    def _listing(self, folder: bytes) -> list[bytes]:
        if folder not in self._caches:
            try:
                self._caches[folder] = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                self._caches[folder] = []
        return self._caches[folder]


def _checks_mtime(pyc: bytes) -> bool:
    """Whether this ``.pyc`` (if it exists) is validated by its source's mtime: every header
    before Python 3.7, and those of 3.7 on whose flags say timestamp (PEP 552)."""
    try:
        with open(pyc, "rb") as f:
            header = f.read(8)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if len(header) < 8:
        return False
    magic = int.from_bytes(header[:2], "little")
    return magic < _PYC_HASH_BASED_FROM or not int.from_bytes(header[4:8], "little") & 1
