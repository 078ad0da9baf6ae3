"""What local sandboxes of this state directory left on the host: the check behind the soak
test, the gc tests and the benchmark. Others' sandboxes (another state directory, another user)
are not counted: they come and go meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from sweflow.sandbox.local import cgroups
from sweflow.sandbox.local.state import registered, registry, state_dir
from sweflow.sandbox.mounts import mounts_under


def leftovers() -> dict[str, list[str]]:
    """State dirs, registry entries, cgroups, mounts and init processes of this state directory
    that belong to no open sandbox (while none is open)."""
    root = state_dir().absolute()
    dirs = [str(p) for p in root.iterdir()] if root.is_dir() else []
    mine = {i for i, directory in registered().items() if directory.parent == root}
    groups = [str(p) for i, paths in cgroups.sandbox_groups().items() if i in mine for p in paths]
    return {
        "dirs": dirs,
        "owners": [str(registry() / i) for i in sorted(mine)],
        "mounts": mounts_under(root),
        "processes": _inits_under(root),
        "cgroups": groups,
    }


def _inits_under(root: Path) -> list[str]:
    """Pids of sandbox inits (keepers included) whose state directory is in ``root``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(argv[0]).name.startswith("sweflow-nsinit") and "--sbdir" in argv[:-1]:
            if Path(argv[argv.index("--sbdir") + 1]).parent == root:
                found.append(name)
    return found
