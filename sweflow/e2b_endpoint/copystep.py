"""A template build's COPY step: its upload checked against its name, then unpacked into a new
layer with every path resolved inside that layer.

The SDK names a COPY's upload by a hash of the step (``COPY src dest``) and of each file it
tars: its path, mode, size and content (a symlink: its target), in the tar's order
(``e2b.template.utils.calculate_files_hash``). That hash is recomputed here from the tar's
members: an upload that is not what its name says is deleted and the build fails, so no upload
can plant files that another build's COPY of the same name (which skips its upload as already
present) would copy. What it unpacks to is capped as the upload is.

The destination is a path of the template: ``..`` stops at its ``/``. The tar is unpacked
(tarfile's ``data`` filter: no absolute or escaping links, no devices, no owners) into a
staging directory inside the layer, and its entries are moved into place by
:mod:`sweflow.sandbox.local.fsaccess`, which resolves every path inside the layer (openat2
RESOLVE_IN_ROOT): a symlink the step itself unpacked is followed within the layer, never out.
"""

from __future__ import annotations

import hashlib
import posixpath
import stat
import tarfile
import uuid
import zlib
from pathlib import Path
from typing import BinaryIO

from sweflow.errors import SweflowError
from sweflow.sandbox.local import fsaccess

_KINDS = {
    tarfile.REGTYPE: stat.S_IFREG,
    tarfile.AREGTYPE: stat.S_IFREG,
    tarfile.DIRTYPE: stat.S_IFDIR,
}


class CopyFailed(SweflowError):
    """The COPY step cannot be done; the message says why."""


def files_hash(upload: BinaryIO, src: str, dest: str, max_bytes: int) -> str:
    """The SDK's files hash of the COPY ``src`` ``dest`` whose tar is ``upload`` (an open
    file: the one then unpacked, never a file renamed over it meanwhile); CopyFailed when it is
    no tar, holds what a COPY cannot, or unpacks to over ``max_bytes``."""
    digest = hashlib.sha256(f"COPY {src} {dest}".encode())
    try:
        upload.seek(0)
        with tarfile.open(fileobj=upload) as tar:
            unpacked = 0
            for member in tar:
                unpacked += _hash_member(tar, member, digest)
                if unpacked > max_bytes:
                    raise CopyFailed(f"its files unpack to over {max_bytes} bytes")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise CopyFailed(f"the upload is not a readable tar: {exc}") from None
    return digest.hexdigest()


def _hash_member(tar: tarfile.TarFile, member: tarfile.TarInfo, digest) -> int:
    """Hash one member as the SDK hashes its file; the bytes it unpacks to."""
    digest.update(member.name.encode())
    if member.issym():
        target = member.linkname.encode()
        digest.update(f"{stat.S_IFLNK | member.mode}{len(target)}".encode() + target)
        return 0
    real = _link_target(tar, member) if member.islnk() else member
    kind = _KINDS.get(real.type)
    if kind is None:
        raise CopyFailed(f"{member.name} is not a file, directory or link")
    digest.update(str(kind | member.mode).encode())
    if kind == stat.S_IFDIR:
        return 0
    digest.update(str(real.size).encode())
    content = tar.extractfile(real)
    assert content is not None
    while chunk := content.read(1 << 20):
        digest.update(chunk)
    return real.size


def _link_target(tar: tarfile.TarFile, member: tarfile.TarInfo) -> tarfile.TarInfo:
    try:
        return tar.getmember(member.linkname)
    except KeyError:
        raise CopyFailed(f"{member.name}: a hard link to {member.linkname}, not in it") from None


def copy_into(layer: Path, upload: BinaryIO, dest: str) -> None:
    """Unpack ``upload`` into ``layer`` at ``dest``: a directory's content goes into ``dest``,
    a file to ``dest/NAME`` when ``dest`` ends in ``/``, else to ``dest`` itself."""
    root = str(layer)
    staging = f"/.sweflow-copy-{uuid.uuid4().hex[:12]}"
    (layer / staging.lstrip("/")).mkdir(parents=True)
    target = posixpath.normpath(posixpath.join("/", dest))
    try:
        upload.seek(0)
        with tarfile.open(fileobj=upload) as tar:
            tar.extractall(layer / staging.lstrip("/"), filter="data")
        for entry in fsaccess.list_dir(root, staging):
            if entry.kind == "dir" and entry.symlink_target is None:
                _merge(root, entry.path, target)
            else:
                into = dest.endswith("/")
                _put(root, entry.path, f"{target.rstrip('/')}/{entry.name}" if into else target)
    except (SweflowError, tarfile.TarError) as exc:
        raise CopyFailed(f"COPY to {dest}: {exc}") from None
    finally:
        fsaccess.remove(root, staging)


def _merge(root: str, source: str, target: str) -> None:
    """Move the content of directory ``source`` into directory ``target`` (made if missing)."""
    fsaccess.make_dirs(root, target)
    for entry in fsaccess.list_dir(root, source):
        inside = f"{target.rstrip('/')}/{entry.name}"
        if entry.kind == "dir" and entry.symlink_target is None and _is_dir(root, inside):
            _merge(root, entry.path, inside)
        else:
            _put(root, entry.path, inside)


def _put(root: str, source: str, target: str) -> None:
    parent = posixpath.dirname(target)
    if parent != "/":
        fsaccess.make_dirs(root, parent)
    fsaccess.move(root, source, target)


def _is_dir(root: str, path: str) -> bool:
    try:
        return fsaccess.stat_path(root, path).kind == "dir"
    except SweflowError:
        return False
