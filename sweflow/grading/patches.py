"""What a patch is, read from its text alone: empty, touching tests, why it failed to apply.

None of this decides a verdict: the apply chain in the sandbox does, as in the harness. These
name the reason an unresolved patch carries, and give the tamper guard (sweflow.grading.guard)
the paths a diff's text names and what counts as a test file.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

_DIFF_PATHS = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|\+\+\+ b/(\S+)|--- a/(\S+))", re.M)
_BINARY = re.compile(r"^(?:GIT binary patch|Binary files .* differ)$", re.M)
_MALFORMED_OUTPUT = (
    "corrupt patch",
    "No valid patches in input",
    "patch fragment without header",
    "unrecognized input",
    "Only garbage was found",
)
TEST_DIRS = frozenset({"test", "tests", "testing"})


def is_empty(patch: str | None) -> bool:
    """The harness skips these: no diff to apply at all."""
    return patch is None or not patch.strip()


def touched_paths(patch: str) -> set[str]:
    """Every path a diff names (old and new sides), read leniently so broken diffs count too."""
    return {p for match in _DIFF_PATHS.finditer(patch) for p in match.groups() if p}


def is_test_path(path: str) -> bool:
    """A test file by the usual conventions: a tests/ directory, test_*.py, *_test.py, conftest."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (
        any(part in TEST_DIRS for part in parts[:-1])
        or name.startswith("test_")
        or PurePosixPath(name).stem.endswith("_test")
        or name == "conftest.py"
    )


def failure_kind(patch: str, apply_output: str) -> str:
    """Why a patch the apply chain refused did not apply: binary, malformed or failed."""
    if _BINARY.search(patch):
        return "binary"
    if any(text in apply_output for text in _MALFORMED_OUTPUT):
        return "malformed"
    try:
        if not PatchSet(patch):
            return "malformed"
    except UnidiffParseError:
        return "malformed"
    return "failed"
