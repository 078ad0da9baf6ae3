"""Compiles the sandbox's C init once per source version and caches the binary."""

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


@cache
def nsinit_path() -> Path:
    """Path of the compiled init, built with ``cc`` on first use (keyed by the source digest)."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = cache_root() / "bin" / f"sweflow-nsinit-{digest}"
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise SandboxConfigError(
            "the local sandbox needs a C compiler once, to build its init: "
            "apt-get install gcc libc6-dev"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        proc = subprocess.run(
            [compiler, "-O2", "-Wall", "-o", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SandboxConfigError(
                f"building {SOURCE.name} with {compiler} failed:\n{proc.stderr}"
            )
        os.replace(tmp, target)
    return target
