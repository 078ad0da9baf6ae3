"""What a store holds and what it can let go: bytes per layer and instance, and gc.

Accounting reads the layers' sidecars, never a tree. Garbage collection takes the store's lock
exclusively, so it waits for running commits (``LayerStore.hold``) and no builder sees a layer
vanish between its commit and the manifest that references it; and it keeps what live leases
name (``leases``): the layers of open sandboxes, of specs just handed out and of instances just
built for a grading, and those instances' manifests, in whichever process they live.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from pydantic import BaseModel, Field

from sweflow.envcache import leases, packing
from sweflow.envcache.filepool import Pooled, pool_tree, prune
from sweflow.envcache.records import load_manifest
from sweflow.envcache.store import LayerStore
from sweflow.envcache.storefiles import (
    LEASE_GRACE_S,
    abandoned,
    apparent_size,
    flocked,
    remove_entry,
    unshared_size,
)
from sweflow.envcache.treedigest import tree_digest
from sweflow.progress import Progress


class LayerUsage(BaseModel):
    size_bytes: int  # apparent size of the tree
    packed_bytes: int  # size of its image, 0 if not packed
    disk_bytes: int  # what the store holds for it: the unpacked dir (not if imported) + image
    external: bool  # imported by reference: its bytes live outside the store


class StoreUsage(BaseModel):
    layers: dict[str, LayerUsage]
    instances: dict[str, int]  # bytes of an instance = the sum of its layers' sizes
    total_bytes: int  # bytes the store's own files take, each layer counted once
    external_bytes: int  # bytes of imported layers, outside the store
    store_bytes_per_instance: float  # total_bytes / instances: what deduplication buys


class StoreGcReport(BaseModel):
    manifests: list[str] = Field(default_factory=list)
    layers: list[str] = Field(default_factory=list)
    packed: list[str] = Field(default_factory=list)
    unmounted: list[str] = Field(default_factory=list)
    tmp: list[str] = Field(default_factory=list)
    pool_files: int = 0  # pool entries no layer linked any more
    freed_bytes: int = 0
    # kept for live leases: layers no manifest needs (digest -> the instances using it), and
    # manifests that are not in keep_instances
    in_use: dict[str, list[str]] = Field(default_factory=dict)
    in_use_instances: list[str] = Field(default_factory=list)
    leases: list[str] = Field(default_factory=list)  # dormant leases on layers now gone
    grace_s: float = LEASE_GRACE_S  # how long after its last use a lease stayed live

    def summary(self) -> str:
        """One sentence for people: what was removed and the space it gave back."""
        parts = [
            f"{count} {what}"
            for what, count in (
                ("manifests", len(self.manifests)),
                ("layers", len(self.layers)),
                ("packed images", len(self.packed)),
                ("stale mounts", len(self.unmounted)),
                ("leftover temporary folders", len(self.tmp)),
                ("pooled files no layer uses", self.pool_files),
            )
            if count
        ]
        said = f"removed {', '.join(parts)}; freed {self.freed_bytes / 2**20:.1f} MiB"
        if not parts:
            said = "nothing to remove"
        if not (self.in_use or self.in_use_instances):
            return said
        kept = [
            f"{len(items)} {what}"
            for what, items in (("layers", self.in_use), ("instances", self.in_use_instances))
            if items
        ]
        return (
            f"{said}; kept {' and '.join(kept)} in use (open sandboxes, or specs handed out and "
            f"instances built in the last {self.grace_s:g} s): run gc again once they are done"
        )


def store_usage(store: LayerStore) -> StoreUsage:
    """Bytes per layer and per instance, from the sidecars (no tree is walked)."""
    layers: dict[str, LayerUsage] = {}
    for digest in sorted(store.digests()):
        if not store.has_layer(digest):
            continue  # an orphan sidecar
        info = store.layer_info(digest)
        image = store.packed_image(digest)
        packed = image.stat().st_size if image is not None else 0
        path = store.layers / digest
        external = path.is_symlink()
        unpacked = info.size_bytes if path.is_dir() and not external else 0
        layers[digest] = LayerUsage(
            size_bytes=info.size_bytes,
            packed_bytes=packed,
            disk_bytes=unpacked + packed,
            external=external,
        )
    instances = {}
    for instance_id in store.instance_ids():
        manifest = store.read_manifest(instance_id)
        if manifest is not None:
            instances[instance_id] = sum(layer.size_bytes for layer in manifest.layers)
    total = sum(layer.disk_bytes for layer in layers.values())
    return StoreUsage(
        layers=layers,
        instances=instances,
        total_bytes=total,
        external_bytes=sum(lay.size_bytes for lay in layers.values() if lay.external),
        store_bytes_per_instance=total / len(instances) if instances else 0.0,
    )


def gc(
    store: LayerStore, keep_instances: set[str] | None = None, *, grace_s: float = LEASE_GRACE_S
) -> StoreGcReport:
    """Remove manifests not in ``keep_instances`` (if given) or unreadable, every layer no
    manifest references (its image unmounted and deleted; an imported layer only loses its
    link), empty mount points, and tmp entries whose owner process is gone (those with no
    owner in their name: when older than ``STALE_TMP_S``). Waits for running commits.

    What a live lease names stays, said in ``in_use`` and ``in_use_instances``: its layers,
    and its instance's manifest even when ``keep_instances`` leaves it out. A lease is live
    while a sandbox holds it, and for ``grace_s`` after its last use (a spec handed out, an
    instance built, a sandbox closed)."""
    report = StoreGcReport(grace_s=grace_s)
    with flocked(store.root / "store.lock"), leases.scan(store, grace_s) as found:
        in_use = found.instances()
        referenced: set[str] = set()
        for path in sorted(store.manifests.glob("*.json")):
            manifest = load_manifest(path)
            dropped = keep_instances is not None and path.stem not in keep_instances
            if manifest is not None and dropped and path.stem in in_use:
                report.in_use_instances.append(path.stem)
                dropped = False
            if manifest is None or dropped:
                path.unlink()
                report.manifests.append(path.stem)
            else:
                referenced.update(layer.digest for layer in manifest.layers)
        users = found.users()
        for digest in sorted(store.digests() - referenced):
            if digest in users:
                report.in_use[digest] = sorted(set(users[digest]))
            else:
                _remove_layer(store, digest, report)
        report.pool_files, freed = prune(store.pool)
        report.freed_bytes += freed
        report.leases = found.withdraw_broken(store)
        for point in store.mnt.iterdir():
            if not os.path.ismount(point):
                try:
                    point.rmdir()
                except OSError:
                    pass  # not empty: not ours to delete
        for entry in sorted(store.tmp.iterdir()):
            if abandoned(entry):
                report.freed_bytes += apparent_size(entry)
                remove_entry(entry)
                report.tmp.append(entry.name)
    return report


def _remove_layer(store: LayerStore, digest: str, report: StoreGcReport) -> None:
    point = store.mnt / digest
    if os.path.ismount(point):
        packing.unmount(point)
        report.unmounted.append(digest)
    image = store.packed_image(digest)
    path = store.layers / digest
    if image is not None or os.path.lexists(path):
        report.layers.append(digest)
    if image is not None:
        report.freed_bytes += image.stat().st_size
        image.unlink()
        report.packed.append(digest)
    if path.is_dir() and not path.is_symlink():
        report.freed_bytes += unshared_size(path)  # its pooled files: when the pool lets go
    if os.path.lexists(path):
        remove_entry(path)
    path.with_name(f"{digest}.json").unlink(missing_ok=True)


class PoolReport(Pooled):
    layers: int = 0  # layers whose files were linked to the pool
    changed: list[str] = Field(default_factory=list)  # layers whose tree no longer has their digest
    pruned_files: int = 0  # entries no layer links any more (files that moved to another entry)
    pruned_bytes: int = 0

    @property
    def given_back(self) -> int:
        """Bytes the store no longer holds: copies now linked, entries no layer links."""
        return self.shared_bytes + self.pruned_bytes


def pool_layers(
    store: LayerStore,
    progress: Progress | None = None,
    only: Iterable[str] | None = None,
) -> PoolReport:
    """Link the files of every stored layer directory (or of the layers ``only`` names) to the
    pool as a commit would now: for a store built before the pool, or before its key's rule
    changed (a file pooled under the old key moves to its entry now), or a layer committed when
    a link failed; then remove the entries no layer links any more. Safe to run again: a
    second run may finish a move the first one's order of layers left (2 of 88,262 files on
    Verified's store), a third found nothing.

    Holds the store's lock exclusively, as gc does: no commit or gc runs meanwhile. A live
    sandbox keeps reading the same bytes (a file is replaced by a link to identical content,
    same mode and owner, by an atomic rename; a file whose mtime nothing checks may take the
    entry's). A layer whose tree no longer has its digest is left alone and named in
    ``changed``: something wrote into it, and its bytes are suspect."""
    report = PoolReport()
    with flocked(store.root / "store.lock"):
        layers = sorted(p for p in store.layers.iterdir() if p.is_dir() and not p.is_symlink())
        if only is not None:
            wanted = set(only)
            layers = [layer for layer in layers if layer.name in wanted]
        for done, layer in enumerate(layers, 1):
            tree = tree_digest(layer)
            if tree.digest != layer.name:
                report.changed.append(layer.name)
            else:
                report.add(pool_tree(layer, store.pool, tree.poolable, tree.linked))
                report.layers += 1
            if progress is not None:
                progress(layer.name, done, len(layers))
        report.pruned_files, report.pruned_bytes = prune(store.pool)
    return report
