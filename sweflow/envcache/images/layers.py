"""One image layer blob into an empty upper: its digests checked as it streams, whiteouts made
overlayfs's.

Layers are read as they are stored (tar, or gzip-compressed; zstd is refused: ``zstandard`` is
not a dependency) and their sha256 checked while they stream: the blob's digest when the source
names it, and always the uncompressed digest (``diff_id``) the image config lists. A layer is
extracted with the checks of ``sweflow.sandbox.tarfiles`` (no absolute names, no ``..``, nothing
written through a symlink), owners, modes, symlinks, hard links within the layer and allowed
xattrs kept, device nodes left out (a sandbox brings its own /dev), and OCI whiteouts turned
into overlayfs ones: ``.wh.NAME`` becomes a character device 0/0 named NAME, ``.wh..wh..opq``
the opaque xattr of its directory, as ``user.overlay.opaque`` (the local sandbox mounts with
``userxattr`` inside its user namespace) and ``trusted.overlay.opaque`` (a mount without it).
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import IO, Any

from sweflow.envcache.images.sources import CHUNK, ImageImportError, ImageSource, LayerBlob
from sweflow.sandbox.layertar import OPAQUE_XATTRS
from sweflow.sandbox.tarfiles import (
    UnsafeArchiveError,
    check_no_symlink_parents,
    extract_member,
    make_parents,
    make_room,
    member_path,
    set_dir_attrs,
)

_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_XATTR_PAX = "SCHILY.xattr."
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def extract_checked(source: ImageSource, blob: LayerBlob, upper: Path) -> None:
    """Extract ``blob`` into ``upper``, checking its digests as it streams."""
    where = f"{source.where}: layer {blob.path}"
    with source.open_blob(blob.path) as raw:
        stored = _Hashing(raw)
        packed = io.BufferedReader(stored, CHUNK)
        plain = _Hashing(_decompressed(packed, where))
        stream = io.BufferedReader(plain, CHUNK)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                _extract_layer(tar, upper)
            while stream.read(CHUNK) or packed.read(CHUNK):  # the tar's padding, the gzip end
                pass
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise ImageImportError(f"{where}: not a readable layer tar: {exc}") from exc
        except UnsafeArchiveError as exc:
            raise ImageImportError(f"{where}: {exc}") from exc
    if blob.digest is not None and stored.digest() != blob.digest:
        raise ImageImportError(f"{where}: digest mismatch: {stored.digest()}, not {blob.digest}")
    if plain.digest() != blob.diff_id:
        raise ImageImportError(
            f"{where}: uncompressed digest mismatch: {plain.digest()}, not {blob.diff_id}"
        )


def _decompressed(packed: io.BufferedReader, where: str) -> IO[bytes]:
    """The layer tar inside ``packed``, by its magic number (media types are not trusted to
    say it: docker archives carry none)."""
    magic = packed.peek(4)[:4]
    if magic.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=packed, mode="rb")
    if magic == _ZSTD_MAGIC:
        raise ImageImportError(f"{where}: zstd-compressed, and zstandard is not installed")
    return packed


class _Hashing(io.RawIOBase):
    """A readable stream that hashes what passes through it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self._sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        self._sha.update(data)
        return len(data)

    def digest(self) -> str:
        return f"sha256:{self._sha.hexdigest()}"


# -- one layer tar ----------------------------------------------------------------------------


def _extract_layer(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack an image layer ``tar`` (a stream) into the empty upper ``dest``, whiteouts as
    overlayfs's; unsafe members raise UnsafeArchiveError."""
    dest = Path(os.path.realpath(dest))
    dirs: list[tuple[tarfile.TarInfo, Path]] = []
    skipped: set[Path] = set()  # device nodes
    for member in tar:
        path = member_path(dest, member.name)
        make_parents(dest, path)
        if path.name.startswith(_WHITEOUT):
            _whiteout(path)
        elif path == dest:
            if not member.isdir():
                raise UnsafeArchiveError(
                    f"unsafe archive member {member.name!r}: replaces the root"
                )
        elif member.ischr() or member.isblk():
            make_room(path, keep_dir=False)
            skipped.add(path)
        elif member.islnk():
            _hard_link(dest, member, path, skipped)
        else:
            make_room(path, keep_dir=member.isdir())
            extract_member(tar, member, dest)
            _set_xattrs(member, path)
            if member.isdir():
                dirs.append((member, path))
    set_dir_attrs(tar, dirs)


def _whiteout(path: Path) -> None:
    """An OCI whiteout entry as overlayfs's: the opaque xattr, or a 0/0 character device."""
    if path.name == _OPAQUE:
        for name in OPAQUE_XATTRS:  # trusted.*: overlayfs as root; user.*: with userxattr
            os.setxattr(path.parent, name, b"y", follow_symlinks=False)
        return
    hidden = path.name.removeprefix(_WHITEOUT)
    if hidden.startswith(_WHITEOUT):  # aufs bookkeeping (.wh..wh.plnk): not content
        return
    if hidden in ("", ".", ".."):
        raise UnsafeArchiveError(f"unsafe whiteout {path}")
    target = path.with_name(hidden)
    make_room(target, keep_dir=False)
    os.mknod(target, stat.S_IFCHR, os.makedev(0, 0))  # mode 0, as overlayfs makes them


def _hard_link(dest: Path, member: tarfile.TarInfo, path: Path, skipped: set[Path]) -> None:
    source = member_path(dest, member.linkname)
    check_no_symlink_parents(dest, source)
    if source in skipped:
        return
    if not os.path.lexists(source) or (source.is_dir() and not source.is_symlink()):
        raise UnsafeArchiveError(
            f"hard link {member.name} -> {member.linkname}: no such file in layer"
        )
    make_room(path, keep_dir=False)
    os.link(source, path, follow_symlinks=False)


def _set_xattrs(member: tarfile.TarInfo, path: Path) -> None:
    """Apply the member's ``SCHILY.xattr.*`` records that are content: ``user.*`` (but not
    ``user.overlay.*``) and file capabilities. Overlay metadata (``trusted.*``, a redirect or
    metacopy could reach another layer's files) and host policy (SELinux labels) stay out."""
    for key, value in member.pax_headers.items():
        name = key.removeprefix(_XATTR_PAX)
        if name == key or not _content_xattr(name):
            continue
        try:
            raw = value.encode("utf-8", "surrogateescape")  # tarfile decoded it so
            os.setxattr(path, name, raw, follow_symlinks=False)
        except OSError as exc:  # user.* on a symlink, or a filesystem without xattrs
            if exc.errno not in (errno.EPERM, errno.ENOTSUP):
                raise


def _content_xattr(name: str) -> bool:
    if name == "security.capability":
        return True
    return name.startswith("user.") and not name.startswith("user.overlay.")
