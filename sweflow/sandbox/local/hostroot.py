"""The host's own root as a read-only base layer.

The keeper clones ``/`` as a detached, non-recursive mount (overlayfs inside a user namespace
refuses a lower directory with mounts below it, and ``/`` always has some), so nothing is ever
mounted on the host for it. Unlike the other layers it is not shifted onto the sandbox's ids:
root inside is not the host's root there, so the host's root-only files (0600 keys, 0640
shadow) stay unreadable, its files appear owned by ``nobody``, and root inside writes only where
the sandbox's own mounts are (its /, /tmp, /dev/shm, the workdir, binds). The masked paths below
hide what other users could read all the same.
"""

from __future__ import annotations

from pathlib import Path

from sweflow.sandbox.errors import SandboxConfigError
from sweflow.sandbox.local.ids import privileged
from sweflow.sandbox.rootfs import HOST_MASKED_PATHS

__all__ = ["HOST_MASKED_PATHS", "check_allowed", "is_host_root"]


def is_host_root(layer: Path) -> bool:
    """``/`` itself, or a mount of it elsewhere (the view older versions mounted, a bind)."""
    try:
        here, root = layer.stat(), Path("/").stat()
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (root.st_dev, root.st_ino)


def check_allowed() -> None:
    """Refuse the host-root layer where the keeper cannot clone ``/`` (it needs root)."""
    if not privileged():
        raise SandboxConfigError(
            "the host-root layer needs root (to clone the mount of /); use a debootstrap or "
            "docker-image base layer instead"
        )
