"""A training run's work folder: what its inputs were, which attempt it holds, who is using it.

Both trainers (SFT and RL) and the pipeline's cache keys need the same three things, so they
live here once: content digests of the inputs (a file by its bytes, a model folder by its
files), the inputs digest of the attempt that last wrote a folder (a killed run resumes only
what the same inputs started), and a lock that keeps a second trainer out of a folder in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from sweflow.errors import ConfigError, SweflowError

ATTEMPT = ".sweflow-attempt.json"
BIG_FILE = 16 << 20  # weights: identified by name, size and mtime, not read on every check


class WorkDirBusyError(SweflowError):
    """Another training run holds the work folder."""


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (a cache key must see contents, not just a path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def folder_digest(folder: Path) -> str:
    """A model folder's identity: small files by content, weights by name, size and mtime (a
    multi-GB checkpoint is not re-read on every cache check)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        info = path.stat()
        if info.st_size > BIG_FILE:
            digest.update(f"{path.name}:{info.st_size}:{info.st_mtime_ns}".encode())
        else:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def content_digest(folder: Path) -> str:
    """A model folder's identity wherever it was made: every file by its bytes, JSON files
    without the ``transformers_version`` stamp a save writes (it says which library wrote the
    file, not what the model does). For caches that outlive a checkout (committed figures of a
    model), where :func:`folder_digest`'s mtimes would differ on every fresh clone."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0")
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                data.pop("transformers_version", None)
            digest.update(json.dumps(data, sort_keys=True).encode())
        else:
            digest.update(file_digest(path).encode())
    return digest.hexdigest()


def last_attempt(folder: Path) -> str | None:
    """The inputs digest of the attempt that last wrote ``folder`` (None: no attempt yet)."""
    record = folder / ATTEMPT
    return json.loads(record.read_text()).get("digest") if record.is_file() else None


def record_attempt(folder: Path, digest: str) -> None:
    """Mark ``folder`` as written by an attempt with inputs ``digest``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ATTEMPT).write_text(json.dumps({"digest": digest}))


def resume_point(
    work: Path, inputs: str, checkpoint: Path | None, stale: Iterable[Path]
) -> Path | None:
    """``checkpoint`` when the last attempt in ``work`` had these ``inputs``; otherwise None,
    and what another attempt left (``stale``: folders or files) is removed. Either way this
    attempt is recorded as ``work``'s."""
    if last_attempt(work) != inputs:
        checkpoint = None
    if checkpoint is None:
        for path in stale:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    record_attempt(work, inputs)
    return checkpoint


@contextlib.contextmanager
def work_lock(work_dir: Path) -> Iterator[None]:
    """One trainer at a time in a work folder (a second one is refused, not interleaved)."""
    if work_dir.exists() and not work_dir.is_dir():
        raise ConfigError(f"{work_dir} is a file, not a folder: give the run a folder")
    work_dir.mkdir(parents=True, exist_ok=True)
    with (work_dir / ".lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkDirBusyError(f"another training run is using {work_dir}") from None
        yield
