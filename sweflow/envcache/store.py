"""The content-addressed store of layers, and the manifest (layer stack) of every instance.

Layout under the store root::

    layers/<digest>/        a finished layer tree (read-only by convention), or a symlink to an
                            imported base layer that lives elsewhere (see ``import_dir``)
    layers/<digest>.json    its sidecar: size, file count, kind, source (never recomputed)
    manifests/<id>.json     an instance's layer stack, lowest first, plus free-form metadata
    packed/<digest>.sqfs    optional squashfs (or ``.erofs``) image of a layer
    mnt/<digest>/           where a packed layer is mounted on the host, shared by all sandboxes
    tmp/                    work in progress; names carry the owner's pid and start time

A builder runs a sandbox with ``upper="disk", upper_dir=store.new_upper()`` on the layers below,
closes it and ``commit``s the upper: the upper is digested and renamed to ``layers/<digest>``,
or deleted when that digest is already stored, so identical layers are stored once.

Concurrency: ``commit``, ``import_dir``, ``pack`` and ``write_manifest`` take a shared flock on
``store.lock`` and ``gc`` an exclusive one, so builders run side by side and a gc waits for them.
A builder that commits a layer and writes the manifest later holds ``hold()`` in between, or a
gc could take the still unreferenced layer away.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from sweflow.envcache import packing
from sweflow.envcache.packing import ImageFormat, PackingError
from sweflow.errors import SweflowError
from sweflow.sandbox.procs import running, start_ticks
from sweflow.sandbox.rootfs import MARKER

LayerKind = Literal["base", "python", "env", "instance", "image"]

_HASH_BATCH = 64  # files per task of the hashing pool
STALE_TMP_S = 3600.0  # a tmp entry without a readable owner is abandoned after this long

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


class StoreError(SweflowError):
    """A layer or manifest is missing or cannot be stored (the message says which and why)."""


# -- digest -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeDigest:
    digest: str
    size_bytes: int  # apparent size of regular files (hard links once) and symlinks
    entries: int
    seconds: float


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
    first_link: dict[tuple[int, int], bytes] = {}
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
        records.append([*head, b"%d" % st.st_gid, payload, *_xattrs(path, strip_build_xattrs)])
    paths = [path for _, path in to_hash]
    batches = [paths[i : i + _HASH_BATCH] for i in range(0, len(paths), _HASH_BATCH)]
    with ThreadPoolExecutor(workers or min(8, os.cpu_count() or 1)) as pool:
        digests = [digest for batch in pool.map(_hash_files, batches) for digest in batch]
    for (index, _), digest in zip(to_hash, digests, strict=True):
        records[index][5] = digest
    total = hashlib.sha256(b"sweflow-layer-v1\n")
    for fields in records:
        total.update(b"".join(len(f).to_bytes(8, "big") + f for f in fields) + b"\n")
    return TreeDigest(total.hexdigest(), size, len(records), time.monotonic() - start)


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


# -- records ----------------------------------------------------------------------------------


class Layer(BaseModel):
    """One layer of an instance's stack, as its manifest records it."""

    digest: str
    kind: LayerKind
    size_bytes: int
    path: Path | None = Field(
        None,
        exclude=True,
        description="where to use it now (set by commit, import_dir, get_layer; not stored)",
    )


class Manifest(BaseModel):
    """An instance's layers, lowest first, and what the builder wants to remember about it."""

    instance_id: str
    layers: list[Layer]
    meta: dict[str, Any] = Field(default_factory=dict)
    created: str


class LayerInfo(BaseModel):
    """The sidecar ``layers/<digest>.json``: computed once, at commit or import."""

    digest: str
    kind: LayerKind
    size_bytes: int
    entries: int
    digest_s: float
    source: str | None = None  # an imported layer's directory (``layers/<digest>`` links to it)
    created: str


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


class GcReport(BaseModel):
    manifests: list[str] = Field(default_factory=list)
    layers: list[str] = Field(default_factory=list)
    packed: list[str] = Field(default_factory=list)
    unmounted: list[str] = Field(default_factory=list)
    tmp: list[str] = Field(default_factory=list)
    freed_bytes: int = 0

    def summary(self) -> str:
        """One sentence for people: what was removed and the space it gave back."""
        parts = [
            f"{len(items)} {what}"
            for what, items in (
                ("manifests", self.manifests),
                ("layers", self.layers),
                ("packed images", self.packed),
                ("stale mounts", self.unmounted),
                ("leftover temporary folders", self.tmp),
            )
            if items
        ]
        if not parts:
            return "nothing to remove"
        return f"removed {', '.join(parts)}; freed {self.freed_bytes / 2**20:.1f} MiB"


# -- the store --------------------------------------------------------------------------------


class LayerStore:
    """Layers by content digest, manifests by instance id, under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.layers = self.root / "layers"
        self.manifests = self.root / "manifests"
        self.packed = self.root / "packed"
        self.mnt = self.root / "mnt"
        self.tmp = self.root / "tmp"
        for directory in (self.layers, self.manifests, self.packed, self.mnt, self.tmp):
            directory.mkdir(parents=True, exist_ok=True)

    def hold(self) -> AbstractContextManager[None]:
        """A context in which no gc runs: wrap commits and the manifest that references them.

        Never call ``gc`` while holding it in the same process: it would wait for itself."""
        return flocked(self.root / "store.lock", shared=True)

    # -- layers -------------------------------------------------------------------------------
    def new_upper(self) -> Path:
        """A fresh empty directory for a sandbox's ``upper_dir``, to be committed afterwards.

        Its parent (where the sandbox also puts its overlay work dir) is named after this
        process, so ``gc`` removes it once the process is gone."""
        work = self.tmp / _owned_name("upper")
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
            if self._present(tree.digest):
                shutil.rmtree(upper)
            else:
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
                staged = self.tmp / _owned_name("link")
                os.symlink(source, staged)
                os.replace(staged, link)
        return Layer(
            digest=tree.digest,
            kind=kind,
            size_bytes=tree.size_bytes,
            path=self.layer_path(tree.digest),
        )

    def get_layer(self, digest: str) -> Layer | None:
        """The stored layer ``digest`` (with the kind it was first stored as), or None."""
        if not self._present(digest):
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
        image = self._image(digest)
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
            existing = self._image(digest)
            if existing is not None and existing != image:
                raise StoreError(f"layer {digest} is already packed as {existing.name}")
            if existing is None:
                source = self.layers / digest
                if not source.is_dir():
                    raise StoreError(f"layer {digest} is not in the store {self.root}")
                staged = self.tmp / _owned_name("pack")
                try:
                    packing.make_image(source.resolve(), staged, fmt)
                    os.replace(staged, image)
                finally:
                    staged.unlink(missing_ok=True)
            if not keep_dir:
                _remove(self.layers / digest)
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
            missing = [layer.digest for layer in layers if not self._present(layer.digest)]
            if missing:
                raise StoreError(f"{instance_id}: layers not in the store: {', '.join(missing)}")
            _write_atomic(target, manifest.model_dump_json(indent=2), self.tmp)
        return manifest

    def read_manifest(self, instance_id: str) -> Manifest | None:
        """The manifest of ``instance_id``, or None if it has none (or an unreadable one)."""
        return _load_manifest(self._manifest_file(instance_id))

    def layer_paths(self, manifest: Manifest) -> list[Path]:
        """The directories of the manifest's layers, lowest first: ``SandboxSpec.layers``."""
        return [self.layer_path(layer.digest) for layer in manifest.layers]

    def has_instance(self, instance_id: str) -> bool:
        """Whether the instance is built: a manifest whose layers are all stored."""
        manifest = self.read_manifest(instance_id)
        return manifest is not None and all(self._present(lay.digest) for lay in manifest.layers)

    def instance_ids(self) -> list[str]:
        return sorted(path.stem for path in self.manifests.glob("*.json"))

    # -- accounting and cleanup ---------------------------------------------------------------
    def usage(self) -> StoreUsage:
        """Bytes per layer and per instance, from the sidecars (no tree is walked)."""
        layers: dict[str, LayerUsage] = {}
        for digest in sorted(self._digests()):
            if not self._present(digest):
                continue  # an orphan sidecar
            info = self.layer_info(digest)
            image = self._image(digest)
            packed = image.stat().st_size if image is not None else 0
            path = self.layers / digest
            external = path.is_symlink()
            unpacked = info.size_bytes if path.is_dir() and not external else 0
            layers[digest] = LayerUsage(
                size_bytes=info.size_bytes,
                packed_bytes=packed,
                disk_bytes=unpacked + packed,
                external=external,
            )
        instances = {}
        for instance_id in self.instance_ids():
            manifest = self.read_manifest(instance_id)
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

    def gc(self, keep_instances: set[str] | None = None) -> GcReport:
        """Remove manifests not in ``keep_instances`` (if given) or unreadable, every layer no
        manifest references (its image unmounted and deleted; an imported layer only loses its
        link), empty mount points, and tmp entries whose owner process is gone (those with no
        owner in their name: when older than ``STALE_TMP_S``). Waits for running commits."""
        report = GcReport()
        with flocked(self.root / "store.lock"):
            referenced: set[str] = set()
            for path in sorted(self.manifests.glob("*.json")):
                manifest = _load_manifest(path)
                if manifest is None or (
                    keep_instances is not None and path.stem not in keep_instances
                ):
                    path.unlink()
                    report.manifests.append(path.stem)
                else:
                    referenced.update(layer.digest for layer in manifest.layers)
            for digest in sorted(self._digests() - referenced):
                self._remove_layer(digest, report)
            for point in self.mnt.iterdir():
                if not os.path.ismount(point):
                    try:
                        point.rmdir()
                    except OSError:
                        pass  # not empty: not ours to delete
            for entry in sorted(self.tmp.iterdir()):
                if _abandoned(entry):
                    report.freed_bytes += _apparent_size(entry)
                    _remove(entry)
                    report.tmp.append(entry.name)
        return report

    # -- internals ----------------------------------------------------------------------------
    def _remove_layer(self, digest: str, report: GcReport) -> None:
        point = self.mnt / digest
        if os.path.ismount(point):
            packing.unmount(point)
            report.unmounted.append(digest)
        image = self._image(digest)
        path = self.layers / digest
        if image is not None or os.path.lexists(path):
            report.layers.append(digest)
        if image is not None:
            report.freed_bytes += image.stat().st_size
            image.unlink()
            report.packed.append(digest)
        if path.is_dir() and not path.is_symlink():
            try:
                report.freed_bytes += self.layer_info(digest).size_bytes
            except StoreError:  # its sidecar is gone: count the files instead
                report.freed_bytes += _apparent_size(path)
        if os.path.lexists(path):
            _remove(path)
        path.with_name(f"{digest}.json").unlink(missing_ok=True)

    def _present(self, digest: str) -> bool:
        return (self.layers / digest).is_dir() or self._image(digest) is not None

    def _image(self, digest: str) -> Path | None:
        for suffix in packing.SUFFIXES.values():
            image = self.packed / f"{digest}{suffix}"
            if image.is_file():
                return image
        return None

    def _digests(self) -> set[str]:
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
        _write_atomic(self.layers / f"{tree.digest}.json", info.model_dump_json(), self.tmp)

    def _manifest_file(self, instance_id: str) -> Path:
        if not instance_id or "/" in instance_id or instance_id.startswith("."):
            raise StoreError(f"invalid instance id {instance_id!r}")
        return self.manifests / f"{instance_id}.json"


# -- helpers ----------------------------------------------------------------------------------


@contextmanager
def flocked(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold a flock on ``path`` (created if absent): exclusive, or ``shared``."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


def _owned_name(prefix: str) -> str:
    """A tmp entry name that tells gc its owner: ``PREFIX-PID-STARTTICKS-RANDOM``."""
    pid = os.getpid()
    return f"{prefix}-{pid}-{start_ticks(pid)}-{uuid.uuid4().hex[:12]}"


def _abandoned(entry: Path) -> bool:
    parts = entry.name.rsplit("-", 3)
    if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
        return not running(int(parts[1]), int(parts[2]))
    return time.time() - entry.lstat().st_mtime > STALE_TMP_S


def _format_of(image: Path) -> ImageFormat:
    return "erofs" if image.suffix == ".erofs" else "squashfs"


def _load_manifest(path: Path) -> Manifest | None:
    try:
        return Manifest.model_validate_json(path.read_text())
    except (FileNotFoundError, ValidationError):
        return None


def _write_atomic(target: Path, text: str, tmp_dir: Path) -> None:
    staged = tmp_dir / _owned_name("write")
    staged.write_text(text)
    os.replace(staged, target)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _apparent_size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)


__all__ = [
    "GcReport",
    "Layer",
    "LayerInfo",
    "LayerStore",
    "LayerUsage",
    "Manifest",
    "PackingError",
    "StoreError",
    "StoreUsage",
    "TreeDigest",
    "tree_digest",
]
