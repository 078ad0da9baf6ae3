"""The host's own root as a read-only base layer.

overlayfs inside a user namespace refuses a lower directory with mounts below it (it could
reveal what they hide), and ``/`` always has some. A non-recursive bind mount of ``/`` has
none: it is made once, shared by all sandboxes, and left for ``sweflow sandbox gc``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sweflow.sandbox.base import SandboxConfigError, SandboxStartError
from sweflow.sandbox.mounts import mount_points
from sweflow.sandbox.rootfs import HOST_MASKED_PATHS

__all__ = ["HOST_MASKED_PATHS", "host_root_view", "is_host_root", "VIEW"]

VIEW = Path("/run/sweflow/hostroot")


def is_host_root(layer: Path) -> bool:
    return layer.resolve() == Path("/")


def host_root_view() -> Path:
    """A submount-free view of ``/`` (made on first use; needs root)."""
    if str(VIEW) in mount_points():
        return VIEW
    if os.geteuid() != 0:
        raise SandboxConfigError(
            "the host-root layer needs root once, to bind-mount / at "
            f"{VIEW}; use a debootstrap or docker-image base layer instead"
        )
    VIEW.mkdir(parents=True, exist_ok=True)
    for args in (["--bind", "/", str(VIEW)], ["-o", "remount,bind,ro", str(VIEW)]):
        proc = subprocess.run(["mount", *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxStartError(f"mount {' '.join(args)} failed: {proc.stderr.strip()}")
    return VIEW
