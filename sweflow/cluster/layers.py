"""Moving an instance's layers between two nodes' stores, by content digest.

Each node of a cluster keeps its own layer store. A node that needs an instance built elsewhere
asks a peer for the manifest, then for each layer it lacks: the peer sends the layer's tree as a
tar (GNU tar with every xattr, numeric owners: overlay whiteouts and opaque directories survive)
and the receiver stores it and checks that it digests to what the manifest names. A base layer
(a rootfs imported by reference, digested by its marker file) is found in place when the
receiver shares the peer's rootfs cache, else unpacked into the receiver's rootfs cache and
imported from there, so it keeps its digest.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sweflow.envcache.records import LayerInfo, Manifest
from sweflow.envcache.store import LayerStore, StoreError
from sweflow.paths import rootfs_cache
from sweflow.sandbox.rootfs import MARKER

_TAR_FLAGS = ["--xattrs", "--xattrs-include=*", "--numeric-owner"]


@dataclass
class LayerPayload:
    """One layer as it travels: its record and its tree as an uncompressed tar."""

    info: LayerInfo
    tar: bytes


@dataclass
class Moved:
    """What bringing one instance to a node cost."""

    layers: int = 0
    bytes: int = 0
    seconds: float = 0.0


def export_layer(store: LayerStore, digest: str) -> LayerPayload:
    """The layer ``digest`` of ``store`` as a tar (a packed layer is read through its mount)."""
    info = store.layer_info(digest)
    tree = store.layer_path(digest).resolve()
    done = subprocess.run(
        ["tar", *_TAR_FLAGS, "-C", str(tree), "-cf", "-", "."], capture_output=True
    )
    if done.returncode != 0:
        raise StoreError(f"layer {digest}: tar failed: {done.stderr.decode(errors='replace')}")
    return LayerPayload(info, done.stdout)


def link_shared_base(store: LayerStore, info: LayerInfo) -> bool:
    """Whether the layer is here already or could be linked in place: a base whose source
    directory this node has too (a shared rootfs cache), so that nothing needs to travel."""
    if store.get_layer(info.digest) is not None:
        return True
    if info.kind != "base" or not info.source or not (Path(info.source) / MARKER).is_file():
        return False
    return store.import_dir(Path(info.source), "base").digest == info.digest


def import_layer(store: LayerStore, payload: LayerPayload) -> None:
    """Store ``payload`` under its digest; a tree that digests otherwise is refused."""
    info = payload.info
    if link_shared_base(store, info):
        return
    with store.fresh_upper() as upper:
        _untar(payload, upper)
        if (upper / MARKER).is_file():  # a rootfs: kept in the rootfs cache, imported by marker
            target = rootfs_cache() / "received" / info.digest
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.is_dir():
                upper.rename(target)
            layer = store.import_dir(target, info.kind)
        else:
            layer = store.commit(upper, info.kind)
    if layer.digest != info.digest:
        why = f"arrived as {layer.digest}: its tree changed on the way"
        raise StoreError(f"layer {info.digest} {why}")


def _untar(payload: LayerPayload, into: Path) -> None:
    done = subprocess.run(
        ["tar", *_TAR_FLAGS, "-C", str(into), "-xpf", "-"], input=payload.tar, capture_output=True
    )
    if done.returncode != 0:
        shutil.rmtree(into, ignore_errors=True)
        why = done.stderr.decode(errors="replace")
        raise StoreError(f"layer {payload.info.digest}: untar failed: {why}")


def missing_layers(store: LayerStore, manifest: Manifest) -> list[str]:
    """The digests of ``manifest`` that ``store`` lacks, lowest first."""
    return [layer.digest for layer in manifest.layers if store.get_layer(layer.digest) is None]


def adopt_manifest(store: LayerStore, manifest: Manifest) -> None:
    """Record a peer's manifest once its layers are here."""
    store.write_manifest(manifest.instance_id, list(manifest.layers), manifest.meta)
