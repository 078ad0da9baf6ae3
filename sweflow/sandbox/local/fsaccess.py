"""Host-side file access inside a sandbox's root, immune to symlink escapes.

The host reaches a live sandbox's files through ``/proc/<init>/root``. A path resolved there by
ordinary ``open`` would follow an absolute symlink planted by the sandbox to the *host's* files;
``openat2(RESOLVE_IN_ROOT)`` resolves every component as if that directory were ``/``.
"""

from __future__ import annotations

import ctypes
import os
import stat

from sweflow.sandbox.base import SandboxConfigError, SandboxFileError

_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_RESOLVE = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS
MAX_READ_BYTES = 1 << 30


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE)
    fd = _libc.syscall(
        _SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _relative(path: str) -> str:
    if not path.startswith("/"):
        raise SandboxConfigError(f"sandbox paths must be absolute, got {path!r}")
    return path.lstrip("/") or "."


def read_file(root: str, path: str) -> bytes:
    """Read ``path`` of the sandbox whose root directory is ``root``."""
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _openat2(rootfd, _relative(path), os.O_RDONLY)
    except OSError as exc:
        raise SandboxFileError(f"cannot read {path} in the sandbox: {exc.strerror}") from exc
    finally:
        os.close(rootfd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SandboxFileError(f"cannot read {path} in the sandbox: not a regular file")
        if info.st_size > MAX_READ_BYTES:
            raise SandboxFileError(f"{path} in the sandbox is larger than {MAX_READ_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_file(root: str, path: str, data: bytes) -> None:
    """Create or replace ``path`` in the sandbox, making missing parent directories."""
    rel = _relative(path)
    parent, _, name = rel.rpartition("/")
    if name in ("", ".", ".."):
        raise SandboxFileError(f"cannot write {path} in the sandbox: not a file path")
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dirfd = _open_dirs(rootfd, parent, path)
        if dirfd != rootfd:
            os.close(dirfd)
        try:
            # the whole path again from the root: a symlink as the last component then resolves
            # as the sandbox's own processes see it (from the parent, an absolute link would not)
            fd = _openat2(rootfd, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise SandboxFileError(f"cannot write {path} in the sandbox: {exc.strerror}") from exc
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    finally:
        os.close(rootfd)


def _open_dirs(rootfd: int, parent: str, path: str) -> int:
    """Open (creating as needed) each directory of ``parent``, every step confined to the root.

    Each step resolves from the root again, so a symlinked component is still followed inside
    the sandbox only; a missing one is created in the directory already resolved above it.
    """
    fd = rootfd
    parts = parent.split("/") if parent else []
    for i, part in enumerate(parts):
        sub = "/".join(parts[: i + 1])
        try:
            try:
                child = _openat2(rootfd, sub, os.O_PATH | os.O_DIRECTORY)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = _openat2(rootfd, sub, os.O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            raise SandboxFileError(f"cannot write {path} in the sandbox: {exc.strerror}") from exc
        finally:
            if fd != rootfd:
                os.close(fd)
        fd = child
    return fd
