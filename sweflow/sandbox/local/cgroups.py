"""Per-sandbox cgroups (v2, or v1 controller hierarchies) for memory, pids and CPU limits.

The init joins them before it creates its namespaces, so every process of the sandbox is
counted; the OOM killer then acts inside the sandbox only.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sweflow.sandbox.errors import SandboxConfigError, SandboxCrashError
from sweflow.sandbox.spec import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "sweflow"
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Hierarchy:
    """Where one controller (or all, on v2) lives."""

    version: int
    root: Path  # the mount point of this hierarchy


@cache
def hierarchies() -> dict[str, Hierarchy]:
    """Controller name -> hierarchy, preferring v1 mounts of a controller when both exist."""
    found: dict[str, Hierarchy] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        mount_point = Path(fields[4])
        if fstype == "cgroup":
            for name in ("memory", "pids", "cpu"):
                if name in options:
                    found[name] = Hierarchy(1, mount_point)
        elif fstype == "cgroup2":
            controllers = mount_point / "cgroup.controllers"
            available = controllers.read_text().split() if controllers.exists() else []
            for name in ("memory", "pids", "cpu"):
                if name in available and name not in found:
                    found[name] = Hierarchy(2, mount_point)
    return found


class SandboxCgroups:
    """The cgroup directories of one sandbox; ``procs_files`` are what the init writes into."""

    def __init__(self, sandbox_id: str, limits: Limits) -> None:
        wanted = {
            "memory": limits.memory_bytes,
            "pids": limits.pids,
            "cpu": limits.cpus,
        }
        wanted = {name: value for name, value in wanted.items() if value is not None}
        self.dirs: list[Path] = []
        if not wanted:
            return
        available = hierarchies()
        missing = [name for name in wanted if name not in available]
        if missing:
            raise SandboxConfigError(
                f"cgroup controller(s) {', '.join(missing)} not available: mount them, or set "
                f"limits {', '.join(_limit_field(m) for m in missing)} to None"
            )
        try:
            for name, value in wanted.items():
                directory = available[name].root / GROUP / sandbox_id
                if directory not in self.dirs:
                    _enable_v2_controllers(available[name], name)
                    directory.mkdir(parents=True, exist_ok=True)
                    self.dirs.append(directory)
                _apply(available[name].version, directory, name, value)
        except PermissionError as exc:
            self.remove()
            raise SandboxConfigError(
                f"cannot create cgroups under {exc.filename}: run as root, use a delegated "
                "cgroup, or set limits memory_bytes/pids/cpus to None"
            ) from exc

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def remove(self) -> list[Path]:
        """Remove them (with any cgroup made below them); the ones that could not be removed."""
        left = []
        for directory in self.dirs:
            try:
                kill_and_remove(directory)
            except (OSError, SandboxCrashError):
                left.append(directory)
        self.dirs = left
        return left


def _limit_field(controller: str) -> str:
    return {"memory": "memory_bytes", "pids": "pids", "cpu": "cpus"}[controller]


def _enable_v2_controllers(hierarchy: Hierarchy, name: str) -> None:
    if hierarchy.version != 2:
        return
    group = hierarchy.root / GROUP
    group.mkdir(exist_ok=True)
    for parent in (hierarchy.root, group):
        control = parent / "cgroup.subtree_control"
        if name not in control.read_text().split():
            control.write_text(f"+{name}")


def _apply(version: int, directory: Path, name: str, value: float) -> None:
    if name == "memory":
        if version == 1:
            (directory / "memory.limit_in_bytes").write_text(str(int(value)))
            swap = directory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(int(value)))
        else:
            (directory / "memory.max").write_text(str(int(value)))
            swap = directory / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
    elif name == "pids":
        (directory / "pids.max").write_text(str(int(value)))
    elif name == "cpu":
        quota = int(value * CPU_PERIOD_US)
        if version == 1:
            (directory / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (directory / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (directory / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")


def sandbox_groups() -> dict[str, list[Path]]:
    """Every sweflow cgroup on the host, by sandbox id (one directory per hierarchy)."""
    found: dict[str, list[Path]] = {}
    for hierarchy in sorted({h.root for h in hierarchies().values()}):
        group = hierarchy / GROUP
        if group.is_dir():
            for directory in group.iterdir():
                if directory.is_dir():
                    found.setdefault(directory.name, []).append(directory)
    return found


def is_empty(directory: Path) -> bool:
    """No process in the cgroup or below it (one that vanished meanwhile counts as empty)."""
    try:
        return not any((group / "cgroup.procs").read_text().split() for group in _tree(directory))
    except FileNotFoundError:
        return True


def _tree(directory: Path) -> list[Path]:
    """``directory`` and every cgroup below it, deepest first (the order to remove them in)."""
    below = [Path(top, name) for top, names, _ in os.walk(directory) for name in names]
    return sorted(below, key=lambda p: len(p.parts), reverse=True) + [directory]


def kill_and_remove(directory: Path) -> bool:
    """Kill whatever is left in a cgroup and the cgroups below it (a sandbox may have made some),
    then remove them deepest first, retrying while the kernel reaps.

    False when the cgroup went away by itself meanwhile (its sandbox closed as gc ran)."""
    for _ in range(100):
        if not directory.is_dir():
            return False
        try:
            for group in _tree(directory):
                for pid in _read_procs(group):
                    try:
                        os.kill(int(pid), 9)
                    except ProcessLookupError:
                        pass
                try:
                    group.rmdir()
                except FileNotFoundError:
                    if group == directory:
                        return False
            return True
        except OSError as exc:
            if exc.errno == errno.ENODEV:  # being removed by its owner
                return False
            if exc.errno != errno.EBUSY:
                raise
            time.sleep(0.01)
    raise SandboxCrashError(f"cgroup {directory} stays busy after killing its processes")


def _read_procs(group: Path) -> list[str]:
    try:
        return (group / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return []
