"""The guard's first check, on the patch's text before anything runs: every file header must
be one read the way ``git apply`` reads it, or the paths it changes are unknowable."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.grading.guard.base import Refusal
from sweflow.grading.patches import touched_paths


def read_paths(patch: str) -> set[str] | Refusal:
    """The repository paths of every file header, read as ``git apply -p1`` reads them, or a
    refusal when a header is quoted, has another prefix, cannot be parsed, or names a path in
    git's own folder (``patch``, the apply chain's last resort, would write there)."""
    try:
        files = PatchSet(patch)
    except UnidiffParseError as exc:
        return Refusal("unreadable_paths", f"the patch cannot be parsed: {exc}")
    headers = len(re.findall(r"^diff --git ", patch, re.M))
    if headers and headers != len(files):
        return Refusal("unreadable_paths", "a `diff --git` header that no parser reads as git does")
    paths: set[str] = set()
    for file in files:
        for raw, prefix in ((file.source_file, "a/"), (file.target_file, "b/")):
            if raw == "/dev/null":
                continue
            if '"' in raw or not raw.startswith(prefix) or not raw[len(prefix) :]:
                return Refusal("unreadable_paths", f"a file header names {raw!r}, not {prefix}PATH")
            paths.add(raw[len(prefix) :])
    paths |= touched_paths(patch)
    if inside_git := sorted(p for p in paths if ".git" in PurePosixPath(p).parts):
        return Refusal("unreadable_paths", f"the patch writes in git's own folder: {inside_git}")
    return paths
