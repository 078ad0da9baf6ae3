"""Where sweflow keeps things on the host (overridable by environment variables)."""

from __future__ import annotations

import os
from pathlib import Path

from sweflow.errors import ConfigError

# The source checkout sweflow runs from: configs/, data/ and benchmarks/ live there, and the
# bundled Prefect deployments run in it (an installed wheel has none of them).
CHECKOUT = Path(__file__).resolve().parents[1]


def cache_root() -> Path:
    """Built artefacts reused across runs: the compiled init, base rootfs layers, images."""
    if env := os.environ.get("SWEFLOW_CACHE"):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(xdg) / "sweflow"


def rootfs_cache() -> Path:
    return cache_root() / "rootfs"


# The operating system's own folders: an output folder in one (``run_dir: /etc``) writes among its
# files, and nothing stops root from doing so.
SYSTEM_FOLDERS = tuple(
    map(Path, "/bin /boot /dev /etc /lib /lib32 /lib64 /libx32 /proc /run /sbin /sys /usr".split())
)
# Folders that hold others' folders: one of these itself is no run's own.
SHARED_FOLDERS = tuple(map(Path, "/ /home /media /mnt /opt /root /srv /tmp /var".split()))


def output_folder_problem(path: Path) -> str | None:
    """Why sweflow must not write into ``path`` as an output folder (a run's, a store, a
    report's): it is a file, a folder of the system, or one this user cannot write; None if
    it can be one (existing or not)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    real = path.resolve()
    if real in SHARED_FOLDERS or any(real == d or d in real.parents for d in SYSTEM_FOLDERS):
        return f"{path} is a folder of the system: name a folder of your own"
    existing = next(p for p in (real, *real.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path} cannot be written ({existing} is not writable)"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one path component (a sentence that quotes it), or None.

    Run ids, instance ids and model names become folder and file names (``logs/run_evaluation/
    <run_id>/<model>/<instance_id>``): a slash or ``..`` would write outside the folder, an empty
    name would write into it, and a line break would make a file name no report can quote."""
    if not name:
        why = "is empty"
    elif name in (".", ".."):
        why = "is not a name"
    elif "/" in name:
        why = "contains '/'"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        why = "contains a control character (a line break, a tab)"
    elif len(name.encode()) > 255:
        why = "is longer than a file name may be (255 bytes)"
    else:
        return None
    return f"{name!r} {why}: it becomes a folder name"


def check_name(name: str, what: str) -> str:
    """``name`` when it can be one path component, else a ConfigError naming ``what`` it is."""
    if (problem := name_problem(name)) is not None:
        raise ConfigError(f"{what} {problem}")
    return name
