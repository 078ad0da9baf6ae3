"""The content-addressed store of layers, and the manifest (layer stack) of every instance.

Here: storing, finding and packing layers, and writing and reading manifests. Elsewhere: the
records' types (``records``), a tree's digest (``treedigest``), the shared-file primitives
(``storefiles``), accounting and gc (``cleanup``).

Layout under the store root::

    layers/<digest>/        a finished layer tree (read-only by convention), or a symlink to an
                            imported base layer that lives elsewhere (see ``import_dir``)
    layers/<digest>.json    its sidecar: size, file count, kind, source (never recomputed)
    manifests/<id>.json     an instance's layer stack, lowest first, plus free-form metadata
    pool/<kk>/<key>         every distinct file of the layers once; layer files are hard links
                            to these (``filepool``)
    packed/<digest>.sqfs    optional squashfs (or ``.erofs``) image of a layer
    mnt/<digest>/           where a packed layer is mounted on the host, shared by all sandboxes
    leases/                 which layer stacks are in use, so that gc keeps them (``leases``)
    tmp/                    work in progress; names carry the owner's pid and start time

A builder runs a sandbox with ``upper="disk", upper_dir=store.new_upper()`` on the layers below,
closes it and ``commit``s the upper: the upper is digested and renamed to ``layers/<digest>``,
or deleted when that digest is already stored, so identical layers are stored once; and the
files of a new layer are linked to the pool, so a file many layers hold is stored once too.

Concurrency: ``commit``, ``import_dir``, ``pack`` and ``write_manifest`` take a shared flock on
``store.lock`` and ``gc`` (``cleanup``) an exclusive one, so builders run side by side and a gc
waits for them. A builder that commits a layer and writes the manifest later holds ``hold()`` in
between, or a gc could take the still unreferenced layer away. Whoever uses an instance's layers
takes a lease on them first (``leases``), which gc respects across processes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweflow.envcache import packing
from sweflow.envcache.filepool import pool_tree
from sweflow.envcache.packing import ImageFormat
from sweflow.envcache.records import Layer, LayerInfo, LayerKind, Manifest, load_manifest
from sweflow.envcache.storefiles import flocked, owned_name, remove_entry
from sweflow.envcache.treedigest import TreeDigest, tree_digest
from sweflow.errors import SweflowError
from sweflow.files import replace_synced, write_atomic
from sweflow.sandbox.rootfs import MARKER


class StoreError(SweflowError):
    """A layer or manifest is missing or cannot be stored (the message says which and why)."""


# -- the store --------------------------------------------------------------------------------


class LayerStore:
    """Layers by content digest, manifests by instance id, under one root directory."""

    def __init__(self, root: Path, *, create: bool = True) -> None:
        """The store at ``root``, its folders made unless ``create`` is false (to read one that
        may not exist, writing nothing: what it lacks it does not hold)."""
        self.root = Path(root).absolute()
        self.layers = self.root / "layers"
        self.manifests = self.root / "manifests"
        self.packed = self.root / "packed"
        self.mnt = self.root / "mnt"
        self.tmp = self.root / "tmp"
        self.leases = self.root / "leases"
        self.pool = self.root / "pool"
        dirs = (
            self.layers,
            self.manifests,
            self.packed,
            self.mnt,
            self.tmp,
            self.leases,
            self.pool,
        )
        for directory in dirs if create else ():
            directory.mkdir(parents=True, exist_ok=True)

    def hold(self) -> AbstractContextManager[None]:
        """A context in which no gc runs: wrap commits and the manifest that references them.

        Never call ``gc`` while holding it in the same process: it would wait for itself."""
        return flocked(self.root / "store.lock", shared=True)

    def staged(self) -> Path:
        """A name in tmp/ to stage a record at (``files.write_atomic``): gc removes one left
        by a process that died before its rename."""
        return self.tmp / owned_name("write")

    # -- layers -------------------------------------------------------------------------------
    def new_upper(self) -> Path:
        """A fresh empty directory for a sandbox's ``upper_dir``, to be committed afterwards.

        Its parent (where the sandbox also puts its overlay work dir) is named after this
        process, so ``gc`` removes it once the process is gone."""
        work = self.tmp / owned_name("upper")
        work.mkdir()
        upper = work / "upper"
        upper.mkdir()
        os.chmod(upper, 0o755)  # the merged root takes its mode from here: not from the umask
        return upper

    @contextmanager
    def fresh_upper(self) -> Iterator[Path]:
        """:meth:`new_upper` for a block that ends in :meth:`commit`: when the block fails, the
        directory goes at once (a failed build leaves nothing in tmp/, not even until gc)."""
        upper = self.new_upper()
        try:
            yield upper
        except BaseException:
            shutil.rmtree(upper.parent, ignore_errors=True)
            raise

    def commit(self, upper: Path, kind: LayerKind) -> Layer:
        """Store the tree at ``upper`` (consumed: moved or deleted) as a layer.

        ``upper`` must be on the store's filesystem and no longer in use by a sandbox."""
        upper = Path(upper).absolute()
        with self.hold():
            tree = tree_digest(upper, strip_build_xattrs=True)
            if self.has_layer(tree.digest):
                shutil.rmtree(upper)
            else:
                pool_tree(upper, self.pool, tree.poolable)
                self._write_info(tree, kind, None)  # before the layer appears: never without it
                try:
                    os.rename(upper, self.layers / tree.digest)
                except OSError as exc:
                    if exc.errno == errno.EXDEV:
                        raise StoreError(
                            f"{upper} is not on the filesystem of the store {self.root}: "
                            "make uppers with new_upper()"
                        ) from exc
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                        raise
                    shutil.rmtree(upper)  # a concurrent commit of the same content won
            if upper.parent.parent == self.tmp:
                shutil.rmtree(upper.parent, ignore_errors=True)
        return Layer(
            digest=tree.digest,
            kind=kind,
            size_bytes=tree.size_bytes,
            path=self.layer_path(tree.digest),
        )

    def import_dir(self, path: Path, kind: LayerKind = "base") -> Layer:
        """Record the directory ``path`` as a layer by reference: ``layers/<digest>`` links to it.

        Base layers (a debootstrap rootfs, hundreds of MB) already live in a cache of their own;
        a copy would double their disk and a content digest would read them whole. A finished
        rootfs (with its marker file) never changes, so its digest is that of the marker; the
        host's ``/`` has a fixed one; any other directory is digested by content and must stay
        unchanged afterwards. ``gc`` removes only the link, never the directory.
        """
        source = Path(path).resolve()
        marker = source / MARKER
        with self.hold():
            if source == Path("/"):  # the host itself (base "host"): named, never walked
                tree = TreeDigest(hashlib.sha256(b"sweflow-host-root").hexdigest(), 0, 0, 0.0)
            elif marker.is_file():
                text = marker.read_bytes()
                size = int(json.loads(text).get("size_bytes", 0))
                digest = hashlib.sha256(b"sweflow-import-v1\n" + text).hexdigest()
                tree = TreeDigest(digest, size, 0, 0.0)
            else:
                tree = tree_digest(source)
            link = self.layers / tree.digest
            if not link.is_dir():  # absent, or a link to where the directory used to be
                self._write_info(tree, kind, str(source))
                staged = self.tmp / owned_name("link")
                os.symlink(source, staged)
                replace_synced(staged, link)
        return Layer(
            digest=tree.digest,
            kind=kind,
            size_bytes=tree.size_bytes,
            path=self.layer_path(tree.digest),
        )

    def get_layer(self, digest: str) -> Layer | None:
        """The stored layer ``digest`` (with the kind it was first stored as), or None."""
        if not self.has_layer(digest):
            return None
        info = self.layer_info(digest)
        return Layer(
            digest=digest,
            kind=info.kind,
            size_bytes=info.size_bytes,
            path=self.layer_path(digest),
        )

    def layer_path(self, digest: str) -> Path:
        """The directory to give a sandbox as this layer: the mount of its image if packed
        (mounted now if needed), else ``layers/<digest>``."""
        image = self.packed_image(digest)
        if image is not None:
            point = self.mnt / digest
            with self.hold(), flocked(self.root / "mount.lock"):
                point.mkdir(exist_ok=True)
                if not os.path.ismount(point):
                    packing.mount_image(image, point, _format_of(image))
            return point
        path = self.layers / digest
        if not path.is_dir():
            raise StoreError(f"layer {digest} is not in the store {self.root}")
        return path

    def pack(self, digest: str, fmt: ImageFormat = "squashfs", *, keep_dir: bool = True) -> Path:
        """Make the read-only image ``packed/<digest>.sqfs|.erofs``; ``layer_path`` mounts it
        from now on. ``keep_dir=False`` deletes the directory: only when no sandbox uses it."""
        image = self.packed / f"{digest}{packing.SUFFIXES[fmt]}"
        with self.hold():
            existing = self.packed_image(digest)
            if existing is not None and existing != image:
                raise StoreError(f"layer {digest} is already packed as {existing.name}")
            if existing is None:
                source = self.layers / digest
                if not source.is_dir():
                    raise StoreError(f"layer {digest} is not in the store {self.root}")
                staged = self.tmp / owned_name("pack")
                try:
                    packing.make_image(source.resolve(), staged, fmt)
                    replace_synced(staged, image)
                finally:
                    staged.unlink(missing_ok=True)
            if not keep_dir:
                remove_entry(self.layers / digest)
        return image

    # -- manifests ----------------------------------------------------------------------------
    def write_manifest(
        self, instance_id: str, layers: list[Layer], meta: dict[str, Any] | None = None
    ) -> Manifest:
        """Record ``instance_id``'s layer stack (lowest first); every layer must be stored."""
        target = self._manifest_file(instance_id)
        manifest = Manifest(
            instance_id=instance_id,
            layers=[Layer.model_validate(layer.model_dump()) for layer in layers],  # no paths
            meta=meta or {},
            created=datetime.now(UTC).isoformat(),
        )
        with self.hold():
            missing = [layer.digest for layer in layers if not self.has_layer(layer.digest)]
            if missing:
                raise StoreError(f"{instance_id}: layers not in the store: {', '.join(missing)}")
            write_atomic(target, manifest.model_dump_json(indent=2), staged=self.staged())
        return manifest

    def read_manifest(self, instance_id: str) -> Manifest | None:
        """The manifest of ``instance_id``, or None if it has none (or an unreadable one)."""
        return load_manifest(self._manifest_file(instance_id))

    def layer_paths(self, manifest: Manifest) -> list[Path]:
        """The directories of the manifest's layers, lowest first: ``SandboxSpec.layers``."""
        return [self.layer_path(layer.digest) for layer in manifest.layers]

    def has_instance(self, instance_id: str) -> bool:
        """Whether the instance is built: a manifest whose layers are all stored."""
        manifest = self.read_manifest(instance_id)
        return manifest is not None and all(self.has_layer(lay.digest) for lay in manifest.layers)

    def instance_ids(self) -> list[str]:
        return sorted(path.stem for path in self.manifests.glob("*.json"))

    # -- what the store holds -----------------------------------------------------------------
    def has_layer(self, digest: str) -> bool:
        """Whether the layer is stored: as a directory (or a link to one) or a packed image."""
        return (self.layers / digest).is_dir() or self.packed_image(digest) is not None

    def packed_image(self, digest: str) -> Path | None:
        """The squashfs or erofs image of the layer, if it was packed."""
        for suffix in packing.SUFFIXES.values():
            image = self.packed / f"{digest}{suffix}"
            if image.is_file():
                return image
        return None

    def digests(self) -> set[str]:
        """Every digest with a directory, link, sidecar or image in the store."""
        names = {path.name.removesuffix(".json") for path in self.layers.iterdir()}
        return names | {path.stem for path in self.packed.iterdir()}

    def layer_info(self, digest: str) -> LayerInfo:
        """The record of a stored layer (kind, size, where an imported one lives)."""
        sidecar = self.layers / f"{digest}.json"
        try:
            return LayerInfo.model_validate_json(sidecar.read_text())
        except (FileNotFoundError, ValidationError) as exc:
            raise StoreError(f"layer {digest}: its record {sidecar} is missing or bad") from exc

    def _write_info(self, tree: TreeDigest, kind: LayerKind, source: str | None) -> None:
        info = LayerInfo(
            digest=tree.digest,
            kind=kind,
            size_bytes=tree.size_bytes,
            entries=tree.entries,
            digest_s=round(tree.seconds, 3),
            source=source,
            created=datetime.now(UTC).isoformat(),
        )
        write_atomic(
            self.layers / f"{tree.digest}.json", info.model_dump_json(), staged=self.staged()
        )

    def _manifest_file(self, instance_id: str) -> Path:
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            raise StoreError(f"invalid instance id {instance_id!r}")
        return self.manifests / f"{instance_id}.json"


def _format_of(image: Path) -> ImageFormat:
    return "erofs" if image.suffix == ".erofs" else "squashfs"
