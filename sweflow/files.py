"""Files that appear whole or not at all, and stay so through a crash: staged, synced, renamed.

A rename is atomic, but not durable by itself: without an fsync of the staged file before it,
a power cut can leave the new name on an empty file (ext4 allocates late), and without one of
the folder after it, the rename itself can be lost. Every record sweflow writes for other
processes to trust (a manifest, a layer's sidecar, a lease, a dataset) goes through here.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def sync_folder(folder: Path) -> None:
    """fsync a folder: the names created, renamed or removed in it are on disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    target: Path,
    data: str | bytes | Callable[[IO[bytes]], None],
    *,
    staged: Path | None = None,
    mode: int = 0o644,
) -> Path:
    """Write ``target`` as a whole: ``data`` (text, bytes, or a function writing into the open
    file) goes to ``staged`` (a hidden name beside ``target`` by default; give one on the same
    filesystem that a cleaner knows, a store's tmp/), is synced, renamed over ``target``, and
    ``target``'s folder synced. A failure leaves ``target`` as it was and removes ``staged``."""
    target = Path(target)
    if staged is None:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        staged = Path(name)
    else:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)  # mkstemp's 0600 would hide a shared record
            os.fsync(fh.fileno())
        os.replace(staged, target)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    sync_folder(target.parent)
    return target


def replace_synced(staged: Path, target: Path) -> None:
    """Rename a file someone else wrote (an image ``mksquashfs`` made) over ``target``, synced
    before and after as ``write_atomic`` is; a link is renamed as it is (nothing to sync)."""
    if not staged.is_symlink():
        with open(staged, "rb") as fh:
            os.fsync(fh.fileno())
    os.replace(staged, target)
    sync_folder(target.parent)


def link_synced(staged: Path, target: Path) -> None:
    """Hard-link a written ``staged`` file as ``target`` (FileExistsError if it exists: never
    over a file that others may hold open), both synced: for a record that must not replace
    another."""
    with open(staged, "rb") as fh:
        os.fsync(fh.fileno())
    os.link(staged, target)
    sync_folder(target.parent)
