#!/usr/bin/env python3
"""Fetch what the tests need from the network, once, so that the tests themselves never do.

``.venv/bin/python scripts/prefetch.py`` (run by scripts/test.sh and scripts/demo.sh after
setup.sh) fills the test cache (``$SWEFLOW_TEST_CACHE``, default ``~/.cache/sweflow-test``, the
same as ``cache_root()`` in tests/conftest.py) with:

* ``rootfs/``: the Debian bookworm base layer the sandbox tests use (debootstrap; needs root);
* ``wheelhouse/``: the wheels of every ``pip_packages`` entry of the specs files of the test data
  and of the demo task set (``SPECS``), for each spec's Python, so that an environment layer
  builds offline with
  ``pip install --no-index --find-links <cache>/wheelhouse ...``.

Idempotent: with both already there it does no work (a stamp holds the specs file's sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = [ROOT / "tests" / "data" / "envcache" / "specs.yaml", ROOT / "data" / "demo" / "specs.yaml"]
STAMP_NAME = ".sweflow-prefetch.json"
STAMP_FORMAT = 2  # bump when what the wheelhouse holds changes for the same specs file


def say(msg: str) -> None:
    print(f"[prefetch] {msg}", flush=True)


def cache_root() -> Path:
    """As tests/conftest.py's cache_root()."""
    root = os.environ.get("SWEFLOW_TEST_CACHE") or Path.home() / ".cache" / "sweflow-test"
    return Path(root)


def prefetch_rootfs(cache: Path) -> bool:
    sys.path.insert(0, str(ROOT))
    from sweflow.sandbox.rootfs import RootfsError, debootstrap_rootfs

    if shutil.which("debootstrap") is None:
        say("rootfs: skipped: debootstrap is not installed (apt-get install debootstrap)")
        return True
    t0 = time.monotonic()
    seen: set[str] = set()

    def progress(line: str, done: int = 0, total: int = 0) -> None:
        # debootstrap says "I: Retrieving foo 1.2" per package: show the first line of each phase.
        m = re.match(r"I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ", line)
        if m is None or m.group(1) not in seen:
            seen.add(m.group(1) if m else "")
            say(f"rootfs: {line.rstrip('.') + ' ...' if m else line}")

    for attempt in (1, 2):
        try:
            path = debootstrap_rootfs("bookworm", cache / "rootfs", progress=progress)
        except RootfsError as exc:
            if os.geteuid() != 0:
                say(f"rootfs: skipped: debootstrap needs root ({str(exc).splitlines()[0]})")
                return True
            say(f"rootfs: attempt {attempt} failed: {exc}")
            continue
        took = time.monotonic() - t0
        say(f"rootfs: {path}" + (f" (built in {took:.0f} s)" if took > 1 else " (cached)"))
        return True
    say("rootfs: error: debootstrap of bookworm failed twice (see the log above)")
    return False


def wheel_targets(specs: dict) -> dict[str, list[str]]:
    """{python version: sorted pip requirement strings} over every (repo, version) spec."""
    out: dict[str, set[str]] = {}
    for repo, versions in specs.items():
        for version, spec in (versions or {}).items():
            python = str(spec.get("python") or "3.11")
            pkgs = spec.get("pip_packages") or []
            if isinstance(pkgs, str):
                pkgs = pkgs.split()
            if not all(isinstance(p, str) for p in pkgs):
                raise SystemExit(f"{repo} {version}: pip_packages must be strings")
            out.setdefault(python, set()).update(pkgs)
    return {py: sorted(pkgs) for py, pkgs in sorted(out.items())}


def prefetch_wheels(cache: Path) -> bool:
    import yaml

    dest = cache / "wheelhouse"
    stamp = dest / STAMP_NAME
    specs_files = [p for p in SPECS if p.exists()]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in specs_files)).hexdigest()
    try:
        have = json.loads(stamp.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        have = None
    if (
        have
        and have.get("specs_sha256") == digest
        and have.get("format") == STAMP_FORMAT
        and all((dest / f).is_file() for f in have.get("files", []))
    ):
        say(f"wheelhouse: up to date ({len(have['files'])} wheels in {dest})")
        return True
    merged: dict = {}
    for path in specs_files:
        merged.update(yaml.safe_load(path.read_text()) or {})
    sys.path.insert(0, str(ROOT))
    from sweflow.envcache.buildsteps import HARNESS_TOOLS

    targets = wheel_targets(merged)
    dest.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    before = {p.name for p in dest.iterdir()}
    t0 = time.monotonic()
    # Each environment layer first installs the harness's pip, setuptools and wheel; they are
    # downloaded on their own, as a spec may pin a newer setuptools for the packages after.
    groups = [(py, group) for py, pkgs in targets.items() for group in (pkgs, HARNESS_TOOLS)]
    for python, pkgs in groups:
        if not pkgs:
            continue
        say(f"wheelhouse: pip download for Python {python}: {' '.join(pkgs)}")
        # Wheels only (an offline install must not build anything), for the spec's Python; pure
        # wheels are platform-independent, others are for this machine's platform.
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--dest",
            str(dest),
            *pkgs,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            say(f"wheelhouse: error: pip download failed:\n{res.stderr.strip()}")
            return False
    files = sorted(p.name for p in dest.iterdir() if p.name.endswith(".whl"))
    new = [f for f in files if f not in before]
    stamp.write_text(
        json.dumps({"format": STAMP_FORMAT, "specs_sha256": digest, "files": files}, indent=1)
        + "\n"
    )
    say(
        f"wheelhouse: {len(files)} wheels in {dest} ({len(new)} new, "
        f"{time.monotonic() - t0:.1f} s): {' '.join(files)}"
    )
    return True


def main() -> int:
    cache = cache_root()
    ok = prefetch_rootfs(cache)
    ok = prefetch_wheels(cache) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
