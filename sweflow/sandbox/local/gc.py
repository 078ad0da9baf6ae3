"""Crash recovery for the local backend: remove what dead sandboxes left behind.

A sandbox's processes and mounts die with its init (the kernel tears the namespaces down), so
after a crash what can remain on the host is its state directory, a disk-upper work directory
and its cgroups. gc removes only what it can prove dead, whichever state directory holds it (the
registry names them all, see state.py): a sandbox whose owner process and keeper are both gone,
or one that closed but could not remove a cgroup. A cgroup that no sandbox registered (an older
sweflow's) goes only once it is empty and older than an open may take. Another state
directory's live sandboxes (a test suite's, a second user's) are never touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sweflow.sandbox.errors import SandboxCrashError
from sweflow.sandbox.local import cgroups
from sweflow.sandbox.local.state import (
    OPEN_TIMEOUT_S,
    OWNER_FILE,
    registered,
    registry,
    state_dir,
)
from sweflow.sandbox.mounts import mounts_under
from sweflow.sandbox.procs import running


@dataclass
class SandboxGcReport:
    live: list[str] = field(default_factory=list)
    removed_dirs: list[str] = field(default_factory=list)
    removed_cgroups: list[str] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)


def _is_live(directory: Path) -> bool | None:
    """Whether the sandbox of ``directory`` is open (or opening): its owner or its keeper runs.
    None when the directory is gone (closed)."""
    try:
        owner = json.loads((directory / OWNER_FILE).read_text())
    except FileNotFoundError:  # an older sweflow's, still opening or crashed before its record
        try:
            return time.time() - directory.stat().st_mtime < OPEN_TIMEOUT_S
        except FileNotFoundError:
            return None
    except (OSError, ValueError):
        return False
    processes = [("owner_pid", "owner_start"), ("keeper_pid", "keeper_start")]
    return any(owner.get(p) and running(owner[p], owner.get(s)) for p, s in processes)


def _umount(point: str) -> bool:
    return subprocess.run(["umount", "-l", point], capture_output=True).returncode == 0


def _remove_dir(directory: Path, report: SandboxGcReport) -> None:
    report.unmounted += [p for p in mounts_under(directory) if _umount(p)]  # an older sweflow's
    try:
        work_dir = json.loads((directory / OWNER_FILE).read_text()).get("work_dir")
    except (OSError, ValueError):
        work_dir = None
    if work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    report.removed_dirs.append(directory.name)


def _remove_groups(groups: list[Path], report: SandboxGcReport) -> bool:
    """Whether every one of them is gone (one that stays busy waits for the next run)."""
    gone = True
    for group in groups:
        try:
            if cgroups.kill_and_remove(group):
                report.removed_cgroups.append(str(group))
        except SandboxCrashError:
            gone = False
    return gone


def _unowned_and_idle(groups: list[Path]) -> bool:
    """An unregistered sandbox's cgroups that nothing uses and no open can still be joining."""
    try:
        old = all(time.time() - g.stat().st_mtime > OPEN_TIMEOUT_S for g in groups)
    except FileNotFoundError:
        return False
    return old and all(cgroups.is_empty(g) for g in groups)


def collect_garbage() -> SandboxGcReport:
    """Remove the leftovers of every local sandbox proved dead (see the module's docstring)."""
    report = SandboxGcReport()
    # Listed in this order, a sandbox opening meanwhile is safe: it writes its owner record,
    # then registers, then makes its cgroups; so a listed cgroup's sandbox is in the registry.
    groups = cgroups.sandbox_groups()
    sandboxes = registered()
    for sandbox_id, directory in sorted(sandboxes.items()):
        live = _is_live(directory)
        if live:
            report.live.append(sandbox_id)
            continue
        if live is False:
            _remove_dir(directory, report)
        if _remove_groups(groups.pop(sandbox_id, []), report):
            (registry() / sandbox_id).unlink(missing_ok=True)
    root = state_dir()
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        if directory.name in sandboxes:
            continue
        live = _is_live(directory)  # unregistered: an older sweflow's, or one opening just now
        if live:
            report.live.append(directory.name)
        elif live is False:
            _remove_dir(directory, report)
    for sandbox_id, paths in sorted(groups.items()):
        if sandbox_id not in report.live and sandbox_id not in registered():
            if _unowned_and_idle(paths):
                _remove_groups(paths, report)
    return report
