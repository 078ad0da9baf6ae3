"""The content digest of a directory tree: the name of a layer in the store.

Equal trees get equal digests whatever their mtimes, so two builders that make the same layer
store it once. A walk of its own, apart from the store's bookkeeping: it is the one costly step
of a commit (every file read), tuned on its own (a hashing thread pool, a reused read buffer).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

_HASH_BATCH = 64  # files per task of the hashing pool

# Overlayfs xattrs that tie an upper to the inodes of the mount that wrote it (a random uuid per
# mount, file handles of the lowers): meaningless once the upper is a lower, and they would make
# every layer's digest unique. They are dropped at commit and never digested. ``opaque``,
# ``redirect``, ``metacopy``, ``whiteout`` and ``protattr`` carry content and are kept.
_BUILD_ONLY_XATTRS = frozenset(
    f"{ns}.overlay.{name}"
    for ns in ("user", "trusted")
    for name in ("origin", "impure", "nlink", "upper", "uuid")
)
_TYPES = {
    stat.S_IFDIR: b"d",
    stat.S_IFREG: b"f",
    stat.S_IFLNK: b"l",
    stat.S_IFCHR: b"c",
    stat.S_IFBLK: b"b",
    stat.S_IFIFO: b"p",
    stat.S_IFSOCK: b"s",
}


@dataclass(frozen=True)
class TreeDigest:
    digest: str
    size_bytes: int  # apparent size of regular files (hard links once) and symlinks
    entries: int
    seconds: float
    # the sha256 (hex) of each file the store's file pool may take: a regular file with
    # content and no xattrs that no other path of the tree links (a link from outside it, the
    # pool's, is fine), by its path relative to the root (``b"/a/b"``)
    poolable: dict[bytes, bytes] = field(default_factory=dict)
    # the inodes (device, number) of the files with more than one link: a file of this tree
    # that joins one of them would be a new hard link inside the tree, and change its digest
    linked: frozenset[tuple[int, int]] = frozenset()


def tree_digest(root: Path, *, strip_build_xattrs: bool = False, workers: int = 0) -> TreeDigest:
    """The content digest of the tree at ``root``: equal trees, equal digests, mtimes aside.

    Each entry (sorted walk) contributes its relative path, type, permission bits, owner, and
    its payload: the sha256 of a file (a later hard link to it: the first path instead), a
    symlink's target, a device's numbers (whiteouts are char 0/0), then all its xattrs but the
    build-only overlay ones, which ``strip_build_xattrs`` also removes from the tree. File
    contents are hashed by a thread pool (hashlib releases the GIL), ``workers`` 0 = automatic.
    """
    start = time.monotonic()
    base = os.fsencode(root)
    records: list[list[bytes]] = []
    to_hash: list[tuple[int, bytes]] = []  # (record index, path) of files whose content counts
    poolable: list[tuple[int, bytes, tuple[int, int]]] = []  # (record index, path, inode)
    first_link: dict[tuple[int, int], bytes] = {}
    repeated: set[tuple[int, int]] = set()  # inodes two paths of the tree link
    size = 0
    stack = [b""]
    while stack:
        rel = stack.pop()
        path = base + rel
        st = os.lstat(path)
        kind = stat.S_IFMT(st.st_mode)
        payload = b""
        if kind == stat.S_IFDIR:
            stack.extend(rel + b"/" + name for name in sorted(os.listdir(path), reverse=True))
        elif kind == stat.S_IFREG:
            key = (st.st_dev, st.st_ino)
            if key in first_link:
                payload = b"=" + first_link[key]
                repeated.add(key)
            else:
                if st.st_nlink > 1:
                    first_link[key] = rel
                size += st.st_size
                to_hash.append((len(records), path))
        elif kind == stat.S_IFLNK:
            payload = os.readlink(path)
            size += st.st_size
        elif kind in (stat.S_IFCHR, stat.S_IFBLK):
            payload = b"%d,%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        head = [rel, _TYPES[kind], b"%o" % stat.S_IMODE(st.st_mode), b"%d" % st.st_uid]
        xattrs = _xattrs(path, strip_build_xattrs)
        if kind == stat.S_IFREG and st.st_size and not xattrs:
            poolable.append((len(records), rel, (st.st_dev, st.st_ino)))
        records.append([*head, b"%d" % st.st_gid, payload, *xattrs])
    paths = [path for _, path in to_hash]
    batches = [paths[i : i + _HASH_BATCH] for i in range(0, len(paths), _HASH_BATCH)]
    with ThreadPoolExecutor(workers or min(8, os.cpu_count() or 1)) as pool:
        digests = [digest for batch in pool.map(_hash_files, batches) for digest in batch]
    for (index, _), digest in zip(to_hash, digests, strict=True):
        records[index][5] = digest
    total = hashlib.sha256(b"sweflow-layer-v1\n")
    for fields in records:
        total.update(b"".join(len(f).to_bytes(8, "big") + f for f in fields) + b"\n")
    files = {rel: records[index][5] for index, rel, inode in poolable if inode not in repeated}
    elapsed = time.monotonic() - start
    return TreeDigest(total.hexdigest(), size, len(records), elapsed, files, frozenset(first_link))


def _hash_files(paths: list[bytes]) -> list[bytes]:
    """The sha256 of each file, read through one reused buffer: most files are small, and a
    fresh buffer (or a future) per file costs more than hashing it."""
    buffer = memoryview(bytearray(1 << 20))
    digests = []
    for path in paths:
        sha = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            while size := os.readv(fd, [buffer]):
                sha.update(buffer[:size])
        finally:
            os.close(fd)
        digests.append(sha.hexdigest().encode())
    return digests


def _xattrs(path: bytes, strip: bool) -> list[bytes]:
    """Sorted name, value pairs of ``path``'s xattrs; build-only overlay ones left out (or
    removed when ``strip``)."""
    try:
        names = sorted(os.listxattr(path, follow_symlinks=False))
    except OSError as exc:
        if exc.errno == errno.ENOTSUP:
            return []
        raise
    pairs: list[bytes] = []
    for name in names:
        if name in _BUILD_ONLY_XATTRS:
            if strip:
                os.removexattr(path, name, follow_symlinks=False)
            continue
        pairs += [name.encode(), os.getxattr(path, name, follow_symlinks=False)]
    return pairs
