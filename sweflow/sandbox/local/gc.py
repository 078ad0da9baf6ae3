"""Crash recovery for the local backend: remove what dead sandboxes left behind.

A sandbox's processes and mounts die with its init (the kernel tears the namespaces down), so
after a crash what can remain on the host is its state directory, a disk-upper work directory,
its cgroups and, once no sandbox holds it, the shared host-root view mount.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sweflow.sandbox.local import cgroups, hostroot
from sweflow.sandbox.local.state import OPEN_TIMEOUT_S, OWNER_FILE, state_dir
from sweflow.sandbox.mounts import mounts_under
from sweflow.sandbox.procs import running


@dataclass
class GcReport:
    live: list[str] = field(default_factory=list)
    removed_dirs: list[str] = field(default_factory=list)
    removed_cgroups: list[str] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)


def _is_live(directory: Path) -> bool | None:
    """Whether the sandbox of ``directory`` is open (or opening); None if it closed just now."""
    try:
        owner = json.loads((directory / OWNER_FILE).read_text())
        return running(owner["keeper_pid"], owner["keeper_start"])
    except FileNotFoundError:  # still opening, crashed before it recorded its keeper, or gone
        try:
            return time.time() - directory.stat().st_mtime < OPEN_TIMEOUT_S
        except FileNotFoundError:
            return None
    except (OSError, ValueError, KeyError):
        return False


def _umount(point: str) -> bool:
    return subprocess.run(["umount", "-l", point], capture_output=True).returncode == 0


def collect_garbage() -> GcReport:
    """Remove leftovers of every local sandbox whose keeper process is gone."""
    report = GcReport()
    root = state_dir()
    entries = sorted(root.iterdir()) if root.is_dir() else []
    for directory in entries:
        live = _is_live(directory)
        if live is None:  # closed since it was listed: nothing left for gc
            continue
        if live:
            report.live.append(directory.name)
            continue
        report.unmounted += [p for p in mounts_under(directory) if _umount(p)]
        try:
            work_dir = json.loads((directory / OWNER_FILE).read_text()).get("work_dir")
        except (OSError, ValueError):
            work_dir = None
        if work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        report.removed_dirs.append(directory.name)
    for group in cgroups.stale_groups(set(report.live)):
        # A sandbox that opened after the folders were listed is live all the same: its state
        # folder is made before its cgroups, so it exists by the time its cgroup is listed.
        directory = root / group.name
        if _is_live(directory):
            continue
        if cgroups.kill_and_remove(group):
            report.removed_cgroups.append(str(group))
    if hostroot.unmount_if_unused():
        report.unmounted.append(str(hostroot.VIEW))
    return report
