"""Where a store's bytes are: one walk of the layers that counts every file once.

A layer's sidecar gives its apparent size, but with the file pool layers share files, so what a
store really holds, and what one more instance costs, are known only by looking at inodes: a
file linked into ten layers is stored once. ``cleanup.store_usage`` stays the cheap view (no
walk); this is the true one, for ``sweflow env du`` and the SWE-bench benchmark.
"""

from __future__ import annotations

import os
import stat
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from sweflow.envcache.records import LayerKind
from sweflow.envcache.store import LayerStore
from sweflow.progress import Progress


class KindUsage(BaseModel):
    """The layers of one kind: how many, their files, their bytes as whole trees, and the
    bytes only they hold (not shared with a layer of any kind)."""

    layers: int = 0
    files: int = 0
    apparent_bytes: int = 0
    own_bytes: int = 0


class DiskUsage(BaseModel):
    instances: int
    layers: int
    files: int  # file entries in all the layers
    distinct_files: int  # what is stored: each inode once
    apparent_bytes: int  # each layer as a whole tree (what a store without the pool would hold)
    disk_bytes: int  # each file once, plus packed images
    shared_bytes: int  # files two or more layers hold, once each
    shared_by_kinds: dict[str, int]  # those bytes by the kinds that share them: "env+instance"
    pool_files: int  # entries in the pool (those no layer links are gc's)
    by_kind: dict[str, KindUsage]
    instance_own_bytes: dict[str, int]  # what deleting this instance alone would give back

    @property
    def mb_per_instance(self) -> float | None:
        return self.disk_bytes / 1e6 / self.instances if self.instances else None

    @property
    def files_deduplicated_pct(self) -> float | None:
        """The share of file entries that are links to a file stored once for several."""
        if not self.files:
            return None
        return 100.0 * (self.files - self.distinct_files) / self.files


def disk_usage(
    store: LayerStore,
    instance_ids: Iterable[str] | None = None,
    *,
    kinds: set[LayerKind] | None = None,
    progress: Progress | None = None,
) -> DiskUsage:
    """The bytes of the layers of ``instance_ids`` (all built instances: None), each file once;
    ``kinds`` keeps only layers of those kinds (``{"env", "instance"}``: above the bases).
    ``progress(layer, done, total)`` after each layer walked."""
    ids = store.instance_ids() if instance_ids is None else list(instance_ids)
    users: dict[str, set[str]] = defaultdict(set)
    kind_of: dict[str, str] = {}
    for instance_id in ids:
        manifest = store.read_manifest(instance_id)
        for layer in manifest.layers if manifest else ():
            if kinds is None or layer.kind in kinds:
                users[layer.digest].add(instance_id)
                kind_of[layer.digest] = layer.kind
    owner: dict[tuple[int, int], str] = {}  # the first layer found holding the file
    sharers: dict[tuple[int, int], set[str]] = {}  # a shared file: the kinds of its layers
    size_of: dict[tuple[int, int], int] = {}
    by_kind: dict[str, KindUsage] = defaultdict(KindUsage)
    own: dict[str, int] = defaultdict(int)  # layer -> bytes of files only it holds
    files = 0
    for done, digest in enumerate(sorted(users), 1):
        kind = kind_of[digest]
        row = by_kind[kind]
        row.layers += 1
        image = store.packed_image(digest)
        if image is not None:  # one compressed file: all of it this layer's own
            own[digest] += image.stat().st_size
            row.apparent_bytes += store.layer_info(digest).size_bytes
        else:
            for key, st in _walk((store.layers / digest).resolve()):
                row.apparent_bytes += st.st_size
                if key is None:  # a symlink: its own bytes
                    own[digest] += st.st_size
                    continue
                row.files += 1
                files += 1
                first = owner.setdefault(key, digest)
                size_of[key] = st.st_size
                if first != digest:
                    sharers.setdefault(key, {kind_of[first]}).add(kind)
        if progress is not None:
            progress(digest, done, len(users))
    shared_by_kinds: dict[str, int] = defaultdict(int)
    for key, holders in sharers.items():
        shared_by_kinds["+".join(sorted(holders))] += size_of[key]
    for key, layer in owner.items():
        if key not in sharers:
            own[layer] += size_of[key]
    shared = sum(shared_by_kinds.values())
    for digest, nbytes in own.items():
        by_kind[kind_of[digest]].own_bytes += nbytes
    instance_own: dict[str, int] = defaultdict(int)
    for digest, holders in users.items():
        if len(holders) == 1:
            instance_own[next(iter(holders))] += own[digest]
    return DiskUsage(
        instances=len(ids),
        layers=len(users),
        files=files,
        distinct_files=len(owner),
        apparent_bytes=sum(row.apparent_bytes for row in by_kind.values()),
        disk_bytes=sum(own.values()) + shared,
        shared_bytes=shared,
        shared_by_kinds=dict(sorted(shared_by_kinds.items(), key=lambda item: -item[1])),
        pool_files=sum(len(os.listdir(folder)) for folder in store.pool.iterdir()),
        by_kind=dict(sorted(by_kind.items())),
        instance_own_bytes={i: instance_own.get(i, 0) for i in ids},
    )


def _walk(root: Path) -> Iterable[tuple[tuple[int, int] | None, os.stat_result]]:
    """(inode key, stat) of every regular file under ``root`` and (None, stat) of every symlink;
    directories, devices (whiteouts) and the rest take no bytes worth counting."""
    stack = [os.fsencode(root)]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    yield (st.st_dev, st.st_ino), st
                elif stat.S_ISLNK(st.st_mode):
                    yield None, st
