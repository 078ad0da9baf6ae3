"""The leases a sandbox holds while it is open: what keeps its layers from being deleted.

Whoever hands out a spec whose layers someone else may delete (a layer store, whose gc runs in
any process at any time) lists lease files in ``SandboxSpec.leases``. A sandbox takes a shared
flock on each before it reads or mounts a layer and keeps it until it closes; a deleter takes
an exclusive one first, so it sees which leases are held and waits for none. The kernel drops
the flocks of a process that dies, so a crashed sandbox owner holds nothing.

A lease file that is gone, or was replaced, when the sandbox locks it means that what it
guarded was deleted in between: the open fails as an infrastructure error (make the spec
again), never with layers half there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

from sweflow.sandbox.errors import SandboxStartError


class HeldLeases:
    """Shared flocks on lease files, from :func:`hold_leases` until :meth:`release`."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        """Let go of every lease (safe to call twice). Each file's time is set to now first:
        a deleter waits a grace period after a lease's last use before it trusts it unused."""
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):  # a store of another user: its time stays
                os.utime(fd)
            os.close(fd)


def hold_leases(paths: Iterable[Path]) -> HeldLeases:
    """Shared flocks on ``paths``, each checked to be still in place once locked."""
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(_hold(Path(path)))
    except BaseException:
        HeldLeases(fds).release()
        raise
    return HeldLeases(fds)


def _hold(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _withdrawn(path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a deleter decides on it
        held, now = os.fstat(fd), os.stat(path)
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
            raise _withdrawn(path)
    except FileNotFoundError:
        os.close(fd)
        raise _withdrawn(path) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _withdrawn(path: Path) -> SandboxStartError:
    return SandboxStartError(
        f"the lease {path} was withdrawn before the sandbox opened: the layers it guarded were "
        "removed (by a store's gc); make the sandbox spec again"
    )
