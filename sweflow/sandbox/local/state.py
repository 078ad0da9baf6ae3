"""Where local sandboxes record themselves on the host, read by the backend that opens them and
by ``sandbox gc``, which removes what crashed owners left."""

from __future__ import annotations

import os
from pathlib import Path

OPEN_TIMEOUT_S = 120.0  # how long an opening sandbox may take; gc leaves younger directories
OWNER_FILE = "owner.json"  # in a sandbox's state directory: the keeper process that owns it


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
