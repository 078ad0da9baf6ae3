"""Layer directories as portable things: a cheap content fingerprint and a docker-form tar.

Backends that cannot mount the host's layer directories (docker, cloud sandboxes) carry a layer
as a tar: an overlayfs whiteout (character device 0/0) becomes a ``.wh.<name>`` entry and an
opaque directory a ``.wh..wh..opq`` entry, docker's own form of "deleted", so what the far side
shows is what the local backend's overlayfs shows. Extended attributes are not carried.

The fingerprint of a layer is the content of its ``.sweflow-rootfs.json`` marker when it has one
(base layers are immutable and the marker carries their creation time), else the largest mtime
(and directory ctime) and the number of entries found by walking it: an ``lstat`` per file,
which notices added, removed and rewritten files, but not a rewrite that restores an older
mtime. A file's own ctime is not read: a layer store that keeps each distinct file once links
other layers' copies to it, which changes its ctime and nothing in this layer.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sweflow.paths import cache_root
from sweflow.sandbox.errors import SandboxConfigError

ROOTFS_MARKER = ".sweflow-rootfs.json"
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")  # as root; with userxattr


def layer_fingerprint(layer: Path) -> str:
    """Cheap identity of a layer directory's content (see the module docstring)."""
    marker = layer / ROOTFS_MARKER
    try:
        return "marker:" + hashlib.sha256(marker.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        pass
    newest, count = 0, 0
    stack = [str(layer)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    count += 1
                    info = entry.stat(follow_symlinks=False)
                    newest = max(newest, info.st_mtime_ns)
                    if entry.is_dir(follow_symlinks=False):
                        newest = max(newest, info.st_ctime_ns)
                        stack.append(entry.path)
        except OSError as exc:
            raise SandboxConfigError(f"cannot read layer {layer}: {exc}") from exc
    top_info = layer.stat()
    newest = max(newest, top_info.st_mtime_ns)
    return f"walk:{newest}:{count}"


def _locks_dir(group: str) -> Path:
    path = cache_root() / group / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(group: str, name: str) -> Iterator[None]:
    """Hold an exclusive lock named ``name`` (shared by every process on this host)."""
    with open(_locks_dir(group) / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _is_whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _is_opaque(path: str) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def write_layer_tar(layer: Path, out: Any) -> None:
    """Write ``layer`` as a docker layer tar (sorted, whiteouts converted) to the file ``out``."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:

        def add(path: str, arcname: str) -> bool:
            """Add one entry; True when it is a directory to descend into."""
            info = os.lstat(path)
            if _is_whiteout(info):
                white = tarfile.TarInfo(
                    _join(arcname.rpartition("/")[0], ".wh." + arcname.rpartition("/")[2])
                )
                white.mtime = int(info.st_mtime)
                tar.addfile(white)
                return False
            member = tar.gettarinfo(path, arcname)
            if member is None:  # a socket: not part of an image
                return False
            member.uname = member.gname = ""
            if member.isreg() and member.type != tarfile.LNKTYPE:
                with open(path, "rb") as f:
                    tar.addfile(member, f)
            else:
                tar.addfile(member)
            if member.isdir():
                if _is_opaque(path):
                    opq = tarfile.TarInfo(_join(arcname, ".wh..wh..opq"))
                    opq.mtime = int(info.st_mtime)
                    tar.addfile(opq)
                return True
            return False

        stack = [("", str(layer))]
        while stack:
            rel, path = stack.pop()
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise SandboxConfigError(f"cannot read layer directory {path}: {exc}") from exc
            subdirs = []
            for name in names:
                child_rel = _join(rel, name)
                child = os.path.join(path, name)
                if add(child, child_rel):
                    subdirs.append((child_rel, child))
            stack.extend(reversed(subdirs))


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
