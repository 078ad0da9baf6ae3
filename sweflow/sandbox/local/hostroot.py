"""The host's own root as a read-only base layer.

overlayfs inside a user namespace refuses a lower directory with mounts below it (it could
reveal what they hide), and ``/`` always has some. A non-recursive bind mount of ``/`` has
none: it is made when a sandbox needs it, shared by all sandboxes on the host, and unmounted
when the last of them closes, so nothing stays mounted on the host afterwards. Each user holds a
shared flock on a lock file; whoever can turn theirs into an exclusive one is the last.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from sweflow.sandbox.errors import SandboxConfigError, SandboxStartError
from sweflow.sandbox.mounts import mount_points
from sweflow.sandbox.rootfs import HOST_MASKED_PATHS

__all__ = ["HOST_MASKED_PATHS", "VIEW", "acquire", "is_host_root", "release", "unmount_if_unused"]

VIEW = Path("/run/sweflow/hostroot")
LOCK = Path("/run/sweflow/hostroot.lock")


def is_host_root(layer: Path) -> bool:
    return layer.resolve() == Path("/")


def acquire() -> int:
    """Hold the view of ``/`` for one sandbox (mounting it if needed): the fd to :func:`release`.

    The shared lock is taken before the mount is checked, so a last user unmounting (under the
    exclusive lock) can never pull the view from under a sandbox that is starting."""
    if os.geteuid() != 0:
        raise SandboxConfigError(
            "the host-root layer needs root, to bind-mount / at "
            f"{VIEW}; use a debootstrap or docker-image base layer instead"
        )
    fd = _open_lock()
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        _mount()
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    """Let go of the view; the last sandbox to let go unmounts it."""
    try:
        _unmount_if_last(fd)
    finally:
        os.close(fd)


def unmount_if_unused() -> bool:
    """Unmount the view if no sandbox holds it (``sandbox gc``, after a crash: the kernel drops
    a dead process's lock); whether it was unmounted."""
    if str(VIEW) not in mount_points():
        return False
    fd = _open_lock()
    try:
        return _unmount_if_last(fd)
    finally:
        os.close(fd)


def _open_lock() -> int:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    return os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _unmount_if_last(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # another sandbox still uses it
    if str(VIEW) not in mount_points():
        return False
    return subprocess.run(["umount", str(VIEW)], capture_output=True).returncode == 0


def _mount() -> None:
    if str(VIEW) in mount_points():
        return
    VIEW.mkdir(parents=True, exist_ok=True)
    for args in (["--bind", "/", str(VIEW)], ["-o", "remount,bind,ro", str(VIEW)]):
        proc = subprocess.run(["mount", *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxStartError(f"mount {' '.join(args)} failed: {proc.stderr.strip()}")
