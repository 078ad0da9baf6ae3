"""Leases on instances' layer stacks: how gc, in any process, knows which layers are in use.

A lease is a file ``leases/<instance_id>.<stack>.lease`` (``stack``: 16 hex digits of the
layers' digests) naming the instance and its layers, one per stack, shared by all its users.
:func:`take` makes it (or sets its time to now) under the store's shared lock, after checking
that every layer is stored: whoever turns a manifest into a sandbox spec
(``instance_spec.instance_sandbox_spec``) or finishes building an instance for someone to use.
A sandbox opened from the spec holds a shared flock on the file from before it mounts a layer
until it closes, and sets the file's time as it lets go (``sweflow.sandbox.leases``).

A lease is live while any flock is held on it, or for a grace period after its time
(``LEASE_GRACE_S`` unless gc is told otherwise): the stretch between handing out a spec (or
building an instance for a grading) and opening a sandbox on it, or between two sandboxes on one
spec, where no flock can be held. gc (``cleanup``) reads
the leases with :func:`scan` under the store's exclusive lock, keeps what live ones name, and
removes a dormant one once a layer it names is gone (a sandbox given that spec later is
refused at open, as an infrastructure failure).

Why flocks rather than records of pid and start time: the kernel drops a flock when its holder
closes the file or dies (killed, out of memory, a crashed node process), so a dead holder keeps
nothing; no pid can be reused and no /proc read (a holder may live in another pid namespace);
and a holder is one sandbox, not a process, so a long-lived trainer or endpoint lets go of each
stack when its sandbox closes, not when it exits. A dead holder's lease is dormant once the
grace has passed, and gc removes what it kept.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from sweflow.envcache.records import LeaseRecord, Manifest
from sweflow.envcache.store import LayerStore, StoreError
from sweflow.envcache.storefiles import LEASE_GRACE_S
from sweflow.files import link_synced

SUFFIX = ".lease"


def take(store: LayerStore, manifest: Manifest) -> Path:
    """The lease on ``manifest``'s layer stack, made if absent, its time set to now.

    Call it under ``store.hold()``, with the manifest read under the same hold: no gc runs in
    between, so a layer stored now stays until the lease is dormant again."""
    digests = [layer.digest for layer in manifest.layers]
    missing = [digest for digest in digests if not store.has_layer(digest)]
    if missing:
        raise StoreError(f"{manifest.instance_id}: layers not in the store: {', '.join(missing)}")
    stack = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]
    path = store.leases / f"{manifest.instance_id}.{stack}{SUFFIX}"
    if not path.exists():
        staged = store.staged()
        record = LeaseRecord(instance_id=manifest.instance_id, layers=digests)
        staged.write_text(record.model_dump_json())
        try:
            link_synced(staged, path)  # never over a file that sandboxes may already hold
        except FileExistsError:
            pass  # a concurrent taker made the same one
        finally:
            staged.unlink()
    os.utime(path)
    return path


@dataclass
class Leases:
    """What :func:`scan` found: the live leases, and the dormant ones gc holds meanwhile."""

    live: list[LeaseRecord] = field(default_factory=list)
    dormant: dict[Path, LeaseRecord | None] = field(default_factory=dict)  # None: unreadable

    def instances(self) -> set[str]:
        return {lease.instance_id for lease in self.live}

    def users(self) -> dict[str, list[str]]:
        """Each leased layer's digest, with the instances whose live leases name it."""
        users: dict[str, list[str]] = {}
        for lease in self.live:
            for digest in lease.layers:
                users.setdefault(digest, []).append(lease.instance_id)
        return users

    def withdraw_broken(self, store: LayerStore) -> list[str]:
        """Remove the dormant leases that name a layer no longer stored (or are unreadable);
        their file names."""
        removed = []
        for path, lease in self.dormant.items():
            if lease is None or not all(store.has_layer(d) for d in lease.layers):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        return removed


@contextmanager
def scan(store: LayerStore, grace_s: float = LEASE_GRACE_S) -> Iterator[Leases]:
    """The store's leases, live (held, or used in the last ``grace_s``) or dormant; call it
    under the store's exclusive lock.

    A dormant lease stays locked (exclusively) until the block ends, so a sandbox that opens on
    it meanwhile waits for gc's verdict: the lease withdrawn (the open fails) or kept."""
    now = time.time()
    found = Leases()
    held: list[int] = []
    try:
        for path in sorted(store.leases.glob(f"*{SUFFIX}")):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a sandbox holds it
                os.close(fd)
                if (lease := _read(path)) is not None:  # always: it was linked in written
                    found.live.append(lease)
                continue
            lease = _read(path)
            if lease is not None and now - os.fstat(fd).st_mtime < grace_s:
                os.close(fd)
                found.live.append(lease)
            else:
                held.append(fd)
                found.dormant[path] = lease
        yield found
    finally:
        for fd in held:
            os.close(fd)


def _read(path: Path) -> LeaseRecord | None:
    try:
        return LeaseRecord.model_validate_json(path.read_text())
    except (FileNotFoundError, ValidationError):
        return None
