"""Host-side file access inside a sandbox's root, immune to symlink escapes.

The host reaches a live sandbox's files through ``/proc/<init>/root``. A path resolved there by
ordinary ``open`` would follow an absolute symlink planted by the sandbox to the *host's* files;
``openat2(RESOLVE_IN_ROOT)`` resolves every component as if that directory were ``/``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
from dataclasses import dataclass

from sweflow.sandbox.errors import SandboxConfigError, SandboxFileError
from sweflow.sandbox.local.ids import owner_of

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


def read_file(root: str, path: str, *, readable_by_all: bool = False) -> bytes:
    """Read ``path`` of the sandbox whose root directory is ``root`` (a regular file only;
    with ``readable_by_all``, only one that every user may read)."""
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_regular(rootfd, _relative(path), os.O_RDONLY, 0, f"read {path}")
    finally:
        os.close(rootfd)
    try:
        info = os.fstat(fd)
        if readable_by_all and not info.st_mode & stat.S_IROTH:
            raise SandboxFileError(
                f"cannot read {path} in the sandbox: the host's files are served only when "
                "every user may read them"
            )
        if info.st_size > MAX_READ_BYTES:
            raise SandboxFileError(f"{path} in the sandbox is larger than {MAX_READ_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _open_regular(rootfd: int, rel: str, flags: int, mode: int, what: str) -> int:
    """Open ``rel`` only if it is a regular file (or, with O_CREAT, missing). A FIFO or device
    is refused before any open that could block on it (or act on a device): an O_PATH open and
    fstat first, then O_NONBLOCK and fstat again, for one swapped in meanwhile."""
    try:
        try:
            probe = _openat2(rootfd, rel, os.O_PATH)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
        else:
            try:
                _require_regular(probe, what)
            finally:
                os.close(probe)
        fd = _openat2(rootfd, rel, flags | os.O_NONBLOCK, mode)
    except OSError as exc:
        raise SandboxFileError(f"cannot {what} in the sandbox: {exc.strerror}") from exc
    try:
        _require_regular(fd, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _require_regular(fd: int, what: str) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise SandboxFileError(f"cannot {what} in the sandbox: not a regular file")


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
        # the whole path again from the root: a symlink as the last component then resolves
        # as the sandbox's own processes see it (from the parent, an absolute link would not)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with owner_of(rootfd):  # root inside owns what the host writes
            fd = _open_regular(rootfd, rel, flags, 0o644, f"write {path}")
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
                    with owner_of(rootfd):
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


@dataclass(frozen=True)
class Entry:
    """What a directory listing or a stat says of one path (a symlink: its target's kind)."""

    path: str
    kind: str  # "file", "dir" or "other"
    size: int
    mode: int  # st_mode: type and permission bits
    uid: int
    gid: int
    mtime: float
    symlink_target: str | None = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rpartition("/")[2] or "/"


def _kind(mode: int) -> str:
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _entry(rootfd: int, dirfd: int, name: str, path: str) -> Entry:
    """The entry ``name`` of the open directory ``dirfd``, resolving a symlink inside the root."""
    info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    target = None
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(name, dir_fd=dirfd)
        try:
            fd = _openat2(rootfd, _relative(path), os.O_PATH)
            try:
                info = os.fstat(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # a dangling link: describe the link itself
    return Entry(
        path,
        _kind(info.st_mode),
        info.st_size,
        info.st_mode,
        info.st_uid,
        info.st_gid,
        info.st_mtime,
        target,
    )


def _split(path: str) -> tuple[str, str]:
    rel = _relative(path)
    parent, _, name = rel.rpartition("/")
    if name in (".", ".."):
        raise SandboxFileError(f"{path}: a path ending in . or .. names no entry")
    return parent or ".", name


def _with_parent(root: str, path: str, what: str, act):
    """``act(rootfd, parentfd, name)`` on the directory holding ``path``, errors named."""
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parent, name = _split(path)
        if name == "":  # the root itself
            return act(rootfd, rootfd, ".")
        dirfd = _openat2(rootfd, parent, os.O_PATH | os.O_DIRECTORY)
        try:
            return act(rootfd, dirfd, name)
        finally:
            os.close(dirfd)
    except OSError as exc:
        raise SandboxFileError(f"cannot {what} {path} in the sandbox: {exc.strerror}") from exc
    finally:
        os.close(rootfd)


def stat_path(root: str, path: str) -> Entry:
    """The entry at ``path`` (FileNotFoundError-backed SandboxFileError when missing)."""
    return _with_parent(root, path, "stat", lambda rfd, dfd, name: _entry(rfd, dfd, name, path))


def list_dir(root: str, path: str, depth: int = 1) -> list[Entry]:
    """Entries under directory ``path``, ``depth`` levels down (symlinked dirs not entered)."""
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _list(rootfd, path.rstrip("/") or "/", depth)
    except OSError as exc:
        raise SandboxFileError(f"cannot list {path} in the sandbox: {exc.strerror}") from exc
    finally:
        os.close(rootfd)


def _list(rootfd: int, path: str, depth: int) -> list[Entry]:
    fd = _openat2(rootfd, _relative(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = sorted(os.listdir(fd))
        entries = [_entry(rootfd, fd, name, f"{path.rstrip('/')}/{name}") for name in names]
    finally:
        os.close(fd)
    found = []
    for entry in entries:
        found.append(entry)
        if depth > 1 and entry.kind == "dir" and entry.symlink_target is None:
            found += _list(rootfd, entry.path, depth - 1)
    return found


def make_dirs(root: str, path: str) -> bool:
    """Create directory ``path`` and its missing parents; False when it already existed."""
    try:
        if stat_path(root, path).kind == "dir":
            return False
    except SandboxFileError:
        pass
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_dirs(rootfd, _relative(path), path)
        if fd != rootfd:
            os.close(fd)
    finally:
        os.close(rootfd)
    return True


def move(root: str, source: str, destination: str) -> None:
    """Rename ``source`` to ``destination``, both resolved inside the sandbox."""

    def act(_rootfd: int, src_dir: int, src_name: str) -> None:
        _with_parent(
            root,
            destination,
            "move to",
            lambda rootfd, dst_dir, dst_name: _rename(rootfd, src_dir, src_name, dst_dir, dst_name),
        )

    _with_parent(root, source, "move", act)


def _rename(rootfd: int, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
    with owner_of(rootfd):  # the kernel checks that the new name has an owner, as a new file
        os.rename(src_name, dst_name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


def remove(root: str, path: str) -> None:
    """Delete ``path``: a file or symlink, or a directory with everything in it."""

    def act(_rootfd: int, dirfd: int, name: str) -> None:
        if name == ".":
            raise SandboxFileError("cannot remove / in the sandbox")
        info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=dirfd)  # fd-based: never follows a link out
        else:
            os.unlink(name, dir_fd=dirfd)

    _with_parent(root, path, "remove", act)
