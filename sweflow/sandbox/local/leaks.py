"""What local sandboxes left on the host: the check behind the soak test and the benchmark."""

from __future__ import annotations

import os

from sweflow.sandbox.local import cgroups
from sweflow.sandbox.local.build import nsinit_path
from sweflow.sandbox.local.state import state_dir
from sweflow.sandbox.mounts import mounts_under


def leftovers() -> dict[str, list[str]]:
    """State dirs, cgroups, mounts and init processes that belong to no open sandbox."""
    root = state_dir()
    dirs = [str(p) for p in root.iterdir()] if root.is_dir() else []
    mounts = mounts_under(root)
    init = str(nsinit_path())
    processes = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                exe = os.readlink(f"/proc/{name}/exe")
            except OSError:
                continue
            if exe == init:
                processes.append(name)
    groups = [str(p) for p in cgroups.stale_groups(set())]
    return {"dirs": dirs, "mounts": mounts, "processes": processes, "cgroups": groups}
