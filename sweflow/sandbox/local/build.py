"""Compiles the sandboxes' C helpers (the local backend's init, the scratch backend's
subreaper) once per source version and caches the binaries."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from sweflow.paths import cache_root
from sweflow.sandbox.errors import SandboxConfigError

SOURCE = Path(__file__).with_name("nsinit.c")


def nsinit_path() -> Path:
    """Path of the compiled init, built with ``cc`` on first use (keyed by the source digest)."""
    return compiled(SOURCE)


@cache
def compiled(path: Path) -> Path:
    """The binary of C source ``path``, built with ``cc`` on first use (keyed by its digest)."""
    source = path.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = cache_root() / "bin" / f"sweflow-{path.stem}-{digest}"
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise SandboxConfigError(
            f"the sandbox needs a C compiler once, to build {path.name}: "
            "apt-get install gcc libc6-dev"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        proc = subprocess.run(
            [compiler, "-O2", "-Wall", "-o", str(tmp), str(path)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SandboxConfigError(f"building {path.name} with {compiler} failed:\n{proc.stderr}")
        os.replace(tmp, target)
    return target
