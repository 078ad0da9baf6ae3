"""Files in a store that several processes share: flocks, owned temporary names, atomic writes.

Builders, gc and mounts run in different processes on one store. A temporary entry is named
after its owner (pid and start time), so gc removes it only once that process is gone; a record
appears under its final name by an atomic, synced rename (``sweflow.files``), never half
written.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sweflow.sandbox.procs import running, start_ticks

STALE_TMP_S = 3600.0  # a tmp entry without a readable owner is abandoned after this long
LEASE_GRACE_S = 300.0  # by default, a lease no one holds stays live this long after its use


@contextmanager
def flocked(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold a flock on ``path`` (created if absent): exclusive, or ``shared``."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


def owned_name(prefix: str) -> str:
    """A tmp entry name that tells gc its owner: ``PREFIX-PID-STARTTICKS-RANDOM``."""
    pid = os.getpid()
    return f"{prefix}-{pid}-{start_ticks(pid)}-{uuid.uuid4().hex[:12]}"


def abandoned(entry: Path) -> bool:
    """Whether the owner of a tmp entry (``owned_name``) is gone; an entry named otherwise is
    abandoned once older than ``STALE_TMP_S``."""
    parts = entry.name.rsplit("-", 3)
    if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
        return not running(int(parts[1]), int(parts[2]))
    return time.time() - entry.lstat().st_mtime > STALE_TMP_S


def remove_entry(path: Path) -> None:
    """Remove a file, a link or a whole directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def unshared_size(path: Path) -> int:
    """Bytes under a directory that deleting it gives back: files no other path links."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if st.st_nlink == 1 or stat.S_ISLNK(st.st_mode):
                total += st.st_size
    return total


def apparent_size(path: Path) -> int:
    """Bytes of a file, or of the files under a directory."""
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)
