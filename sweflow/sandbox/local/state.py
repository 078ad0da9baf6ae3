"""Where local sandboxes record themselves on the host, read by the backend that opens them and
by ``sandbox gc``, which removes what dead owners left.

A sandbox's state directory (under ``state_dir()``, which SWEFLOW_STATE_DIR moves) holds its
mount points and its owner record: the host process that opened it and its keeper, each as pid
and start time. The registry (one per host user, whatever the state directory) names every
sandbox's state directory, so that a gc run for one state directory can tell another's live
sandbox (a test suite's, a second user's) from a dead one before it touches its cgroups.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OPEN_TIMEOUT_S = 120.0  # how long an opening sandbox may take; gc leaves younger directories
OWNER_FILE = "owner.json"  # in a sandbox's state directory: the processes that own it


def state_dir() -> Path:
    """Where live sandboxes keep mount points and owner records (``sandbox gc`` looks here)."""
    if env := os.environ.get("SWEFLOW_STATE_DIR"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/sweflow/sandboxes")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return (
        Path(runtime) / "sweflow" / "sandboxes" if runtime else Path(f"/tmp/sweflow-{os.geteuid()}")
    )


def registry() -> Path:
    """The folder of ``<sandbox id> -> <its state directory>`` links of this host user, the same
    whatever SWEFLOW_STATE_DIR says."""
    if os.geteuid() == 0:
        return Path("/run/sweflow/owners")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return (
        Path(runtime) / "sweflow" / "owners"
        if runtime
        else Path(f"/tmp/sweflow-{os.geteuid()}-owners")
    )


def write_owner(directory: Path, record: dict) -> None:
    """Replace the owner record atomically: gc must never read a half-written one."""
    partial = directory / f"{OWNER_FILE}.part"
    partial.write_text(json.dumps(record))
    partial.rename(directory / OWNER_FILE)


def registered() -> dict[str, Path]:
    """Sandbox id -> state directory, for every sandbox in the registry (the directory of one
    that closed but could not remove a cgroup is gone)."""
    try:
        links = list(registry().iterdir())
    except FileNotFoundError:
        return {}
    found = {}
    for link in links:
        try:
            found[link.name] = Path(os.readlink(link))
        except OSError:  # removed meanwhile (closed), or not a link
            continue
    return found
