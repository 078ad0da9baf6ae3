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
