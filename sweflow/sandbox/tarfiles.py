"""Unpacking tars into trees a sandbox will run on, safely: the member checks every unpacker shares.

Two unpackers meet hostile archives: a docker image's export (``rootfs.docker_image_rootfs``)
and an image layer (``sweflow.envcache.images``). Both must refuse a member that would land or
link outside its destination (an absolute name, ``..``, a path through a symlink an earlier
member planted), let later members replace earlier ones as tar does, and set directories' owners,
modes and mtimes only after their contents. Those checks live here, once.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from sweflow.errors import SweflowError


class UnsafeArchiveError(SweflowError):
    """An archive member that would land or link outside the tree it is unpacked into."""


class ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (a docker export, an HTTP body)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def member_path(dest: Path, name: str) -> Path:
    """Where archive member ``name`` lands under ``dest``.

    Absolute names and any ``..`` are refused outright, even ones that would stay inside:
    tarfile writes to the name as given, and ``a/../x`` climbs out if ``a`` is a symlink.
    """
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts:
        raise UnsafeArchiveError(f"unsafe archive member {name!r}: it could land outside {dest}")
    return dest.joinpath(*parts)


def check_no_symlink_parents(dest: Path, path: Path) -> None:
    """Refuse to write through a symlink an earlier member planted (e.g. ``lib -> /``)."""
    for parent in _parents(dest, path):
        if not parent.exists():
            return


def make_parents(dest: Path, path: Path) -> None:
    """Create the missing parents of ``path`` (root's, 0755: docker's choice), refusing to go
    through a symlink an earlier member planted."""
    for parent in _parents(dest, path):
        if not parent.exists():
            parent.mkdir()
            os.chmod(parent, 0o755)


def _parents(dest: Path, path: Path) -> Iterator[Path]:
    """The directories from ``dest`` down to ``path``'s parent, each checked not a symlink."""
    current = dest
    for part in path.relative_to(dest).parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise UnsafeArchiveError(
                f"unsafe archive member: {path} would be written through {current}"
            )
        yield current


def make_room(path: Path, keep_dir: bool) -> None:
    """Make room for a member: later members replace earlier ones, as in tar itself."""
    if not os.path.lexists(path):
        return
    if path.is_dir() and not path.is_symlink():
        if not keep_dir:
            shutil.rmtree(path)
    else:
        path.unlink()


def safe_extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``tar`` (may be a stream) into ``dest`` as a root filesystem, safely.

    Keeps symlinks (as written, absolute ones included: they resolve inside the sandbox),
    hard links, modes (setuid too) and numeric ownership; refuses members that would land or
    link outside ``dest``; leaves device nodes out, since a sandbox brings its own /dev.
    """
    dest = Path(os.path.realpath(dest))
    dirs: list[tuple[tarfile.TarInfo, Path]] = []
    skipped: set[Path] = set()
    for member in tar:
        path = member_path(dest, member.name)
        check_no_symlink_parents(dest, path)
        if path == dest and not member.isdir():
            raise UnsafeArchiveError(f"unsafe archive member {member.name!r}: replaces the root")
        if member.ischr() or member.isblk():
            make_room(path, keep_dir=False)
            skipped.add(path)
            continue
        make_room(path, keep_dir=member.isdir())
        if member.islnk():
            source = member_path(dest, member.linkname)
            check_no_symlink_parents(dest, source)
            if source in skipped:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, path, follow_symlinks=False)
            continue
        extract_member(tar, member, dest)
        if member.isdir():
            dirs.append((member, path))
    set_dir_attrs(tar, dirs)


def extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    """Write one checked member under ``dest``, owners by number; a directory's owner, mode and
    mtime wait for ``set_dir_attrs`` (its members are written after it)."""
    tar.extract(
        member,
        dest,
        set_attrs=not member.isdir(),
        numeric_owner=True,
        filter=tarfile.fully_trusted_filter,
    )


def set_dir_attrs(tar: tarfile.TarFile, dirs: list[tuple[tarfile.TarInfo, Path]]) -> None:
    """Owners, mtimes and modes of extracted directories, deepest first, as extractall does:
    set earlier, a read-only directory or its mtime would not survive its members."""
    for member, path in reversed(dirs):
        tar.chown(member, str(path), numeric_owner=True)
        tar.utime(member, str(path))
        tar.chmod(member, str(path))
