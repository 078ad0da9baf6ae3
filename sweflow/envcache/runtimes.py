"""Where an environment's Python comes from: the Debian suite that ships that version as its
own, or a host interpreter (pyenv) copied onto bookworm, or whatever the user's ``base`` has."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from sweflow.errors import SweflowError

SUITE_PYTHONS = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
HOST_PYTHON_BASE = "debian:bookworm"  # pyenv interpreters here are built against bookworm's libs
PYENV_ROOTS = ("~/.pyenv/versions", "/opt/pyenv/versions")


class NoPythonError(SweflowError):
    """No base ships the spec's Python version and no host interpreter has it."""


@dataclass(frozen=True)
class Runtime:
    """Where the Python of an environment comes from."""

    base: str
    python: str  # the interpreter's path inside the sandbox
    host_prefix: Path | None = None  # a host interpreter to copy into a python layer


def find_runtime(version: str, base: str | None) -> Runtime:
    """The base layer and interpreter for ``python: version``; an error says what was searched."""
    if base is not None:
        return Runtime(base, f"python{version}")
    if version in SUITE_PYTHONS:
        return Runtime(f"debian:{SUITE_PYTHONS[version]}", f"/usr/bin/python{version}")
    roots = [os.path.expanduser(r) for r in PYENV_ROOTS]
    if env_root := os.environ.get("PYENV_ROOT"):
        roots.insert(0, os.path.join(env_root, "versions"))
    found = sorted(
        (p for root in roots for p in glob.glob(os.path.join(root, f"{version}.*"))),
        key=lambda p: [int(x) if x.isdigit() else x for x in Path(p).name.split(".")],
    )
    for prefix in reversed(found):
        exe = Path(prefix) / "bin" / f"python{version}"
        if exe.exists():
            return Runtime(HOST_PYTHON_BASE, str(exe), Path(prefix).resolve())
    raise NoPythonError(
        f"no Python {version}: no Debian suite ships it ({', '.join(SUITE_PYTHONS)}) and no host "
        f"interpreter was found under {', '.join(roots)}; install it with pyenv or set `base`"
    )
