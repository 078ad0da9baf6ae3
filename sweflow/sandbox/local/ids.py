"""The host identity a local sandbox runs as: root inside is never the host's root.

A root-run host gives every open sandbox a range of 65536 ids of its own (root inside is the
first): the range of ``/etc/subuid`` and ``/etc/subgid``'s ``sweflow`` entry when there is one,
else ids from 2^31 up, which no distribution hands out (useradd and systemd stay far below). A
range is held by an flock on ``/run/sweflow/ids/<n>``, which the sandbox's keeper inherits, so
it is free again only once the sandbox's last process is gone. The layers are shifted onto the
range by idmapped mounts (see nsinit.c), so files keep their owners inside.

A user-run host (or root inside a user namespace of its own) maps only itself: the kernel lets
an unprivileged writer map nothing else, and that user is already no one else's root.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sweflow.sandbox.errors import SandboxStartError

RANGE = 65536  # ids inside a root-run sandbox: 0 .. 65535
DEFAULT_START = 1 << 31
SUBID_NAME = "sweflow"  # the /etc/subuid and /etc/subgid entry that sets the ranges
LOCKS = Path("/run/sweflow/ids")
OVERFLOW_ID = 65534  # how the kernel shows an id that has no mapping
_PR_GET_SECUREBITS, _PR_SET_SECUREBITS, _SECBIT_NO_SETUID_FIXUP = 27, 28, 1 << 2

_libc = ctypes.CDLL(None, use_errno=True)
for _set_id in (_libc.setfsuid, _libc.setfsgid):  # ids past 2^31 do not fit a C int
    _set_id.argtypes, _set_id.restype = [ctypes.c_uint], ctypes.c_uint


@dataclass(frozen=True)
class SandboxIds:
    """Inside id ``i`` (``0 <= i < count``) is host uid ``uid + i`` and host gid ``gid + i``."""

    uid: int
    gid: int
    count: int

    def argv(self) -> list[str]:
        return ["--uid", str(self.uid), "--gid", str(self.gid), "--id-count", str(self.count)]

    def inside(self, uid: int, gid: int) -> tuple[int, int]:
        """The owner a host-side stat reports, as the sandbox sees it."""
        return _inside(uid, self.uid, self.count), _inside(gid, self.gid, self.count)


def _inside(host: int, start: int, count: int) -> int:
    return host - start if 0 <= host - start < count else OVERFLOW_ID


@cache
def privileged() -> bool:
    """Root of the host's own user namespace: the only one that may map other ids."""
    return os.geteuid() == 0 and Path("/proc/self/uid_map").read_text().split() == [
        "0",
        "0",
        "4294967295",
    ]


def _subordinate(table: str) -> tuple[int, int] | None:
    """(start, count) of the ``sweflow`` entry of /etc/subuid or /etc/subgid, if any."""
    try:
        lines = Path(table).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] == SUBID_NAME:
            return int(fields[1]), int(fields[2])
    return None


def _slots() -> tuple[int, int, int]:
    """(first uid, first gid, how many ranges) a root-run host hands out."""
    uids, gids = _subordinate("/etc/subuid"), _subordinate("/etc/subgid")
    if uids is None or gids is None:
        return DEFAULT_START, DEFAULT_START, (1 << 32) // RANGE - DEFAULT_START // RANGE - 1
    return uids[0], gids[0], min(uids[1], gids[1]) // RANGE


def allocate() -> tuple[SandboxIds, int]:
    """The ids of a new sandbox and the fd holding them (-1 when there is nothing to hold)."""
    if not privileged():
        return SandboxIds(os.getuid(), os.getgid(), 1), -1
    uid, gid, slots = _slots()
    LOCKS.mkdir(parents=True, exist_ok=True)
    for n in range(slots):
        fd = os.open(LOCKS / str(n), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return SandboxIds(uid + n * RANGE, gid + n * RANGE, RANGE), fd
    raise SandboxStartError(f"all {slots} id ranges of local sandboxes are in use ({LOCKS})")


@contextmanager
def owner_of(dir_fd: int) -> Iterator[None]:
    """What this thread creates meanwhile is owned by the owner of ``dir_fd`` (a sandbox's /:
    its root), as if root inside had made it; the host's root keeps its capabilities (overriding
    permissions as root inside would). Without it the kernel refuses the files outright: host
    uid 0 has no mapping in the sandbox's filesystems. The fs ids are per thread."""
    st = os.fstat(dir_fd)
    if os.geteuid() != 0 or (st.st_uid, st.st_gid) == (0, 0):
        yield
        return
    bits = _call(_libc.prctl, _PR_GET_SECUREBITS, 0, 0, 0, 0)
    _call(_libc.prctl, _PR_SET_SECUREBITS, bits | _SECBIT_NO_SETUID_FIXUP, 0, 0, 0)
    try:
        _libc.setfsgid(st.st_gid)
        _libc.setfsuid(st.st_uid)
        if _libc.setfsuid(0xFFFFFFFF) != st.st_uid:  # it answers the current one, whatever happened
            raise OSError(f"cannot act as uid {st.st_uid} in the sandbox")
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)
        _call(_libc.prctl, _PR_SET_SECUREBITS, bits, 0, 0, 0)


def _call(fn, *args: int) -> int:
    result = fn(*args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result
