"""Wrong patches made from an instance's gold patch, for cross-checks and benchmarks.

A grader that only ever sees gold patches proves little: these are the patches an agent really
produces. Each maker returns ``None`` when it does not fit the instance (one hunk cannot be
reverted from a one-hunk fix).

- ``revert_hunk``: the gold patch less its largest source hunk (a partial fix);
- ``break``: the base code with an ``raise`` at the top of the first source file the fix touches
  (applies cleanly, fails every test importing it);
- ``stale``: the gold patch with every removed line altered (does not apply: written against
  another version of the file, as a model recalling old code does);
- ``malformed``: a diff whose hunk header is garbage;
- ``empty``: no patch at all;
- ``other_bug``: the gold fix plus the bug of another task of the same repository (fixed this,
  broke that: applies cleanly, and resolves only if the other bug spares every graded test).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from pathlib import Path

from unidiff import PatchSet

from sweflow.grading.patches import is_test_path
from sweflow.grading.predictions import Prediction
from sweflow.instances import Instance
from sweflow.sandbox import SandboxFileError

MALFORMED = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@ oops\n-a\n+b\n"
BREAK_LINE = 'raise ImportError("broken on purpose by sweflow.grading.variants")\n'

ReadFile = Callable[[str], str]  # a repository-relative path -> its text at base_commit
Maker = Callable[[Instance, ReadFile, list[Instance]], str | None]  # instance, read, peers


def _file_diff(path: str, old: str, new: str) -> str:
    """A git-style diff of one file's text."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def revert_hunk(instance: Instance, read: ReadFile, peers: list[Instance]) -> str | None:
    """The gold patch less its largest source hunk (most added lines: likely the core of the fix),
    as an agent that got all but one part right would write it."""
    patch = PatchSet(instance.patch)
    hunks = [(f, h) for f in patch if not is_test_path(f.path) and not f.is_binary_file for h in f]
    if len(hunks) < 2:
        return None
    target, hunk = max(hunks, key=lambda fh: fh[1].added)
    target.remove(hunk)
    if not len(target):
        patch.remove(target)
    return str(patch)


def break_import(instance: Instance, read: ReadFile, peers: list[Instance]) -> str | None:
    """A raise at the top of the first Python source file the gold patch modifies."""
    for f in PatchSet(instance.patch):
        if f.path.endswith(".py") and f.is_modified_file and not is_test_path(f.path):
            old = read(f.path)
            return _file_diff(f.path, old, BREAK_LINE + old)
    return None


def stale(instance: Instance, read: ReadFile, peers: list[Instance]) -> str | None:
    """The gold patch with each removed line changed, so its hunks match no file."""
    lines = instance.patch.splitlines(keepends=True)
    out = [
        line[:-1] + "  # stale\n" if line.startswith("-") and not line.startswith("---") else line
        for line in lines
    ]
    return "".join(out) if out != lines else None


def _replace_once(text: str, old: str, new: str) -> str | None:
    return text.replace(old, new) if text.count(old) == 1 else None


def _edit(files: dict[str, str], patch: str, reverse: bool) -> bool:
    """Apply ``patch`` (or its reverse) to ``files`` in place, each hunk matched exactly once."""
    for f in PatchSet(patch):
        if f.path not in files or f.is_binary_file:
            return False
        for hunk in f:
            old = "".join(line.value for line in hunk if not line.is_added)
            new = "".join(line.value for line in hunk if not line.is_removed)
            if reverse:
                old, new = new, old
            edited = _replace_once(files[f.path], old, new)
            if edited is None:
                return False
            files[f.path] = edited
    return True


def other_bug(instance: Instance, read: ReadFile, peers: list[Instance]) -> str | None:
    """The gold fix and, undone, the fix of the first peer of the same repository whose bug
    fits this base: one diff per file, made from the edited texts."""
    read = functools.cache(read)  # the same files are read for every peer tried
    touched = {f.path for f in PatchSet(instance.patch) if not f.is_added_file}
    for peer in peers:
        if peer.repo != instance.repo or peer.instance_id == instance.instance_id:
            continue
        paths = touched | {f.path for f in PatchSet(peer.patch) if not f.is_added_file}
        try:
            base = {path: read(path) for path in sorted(paths)}
        except (SandboxFileError, UnicodeDecodeError):  # not in this version of the repository
            continue
        files = dict(base)
        if _edit(files, instance.patch, reverse=False) and _edit(files, peer.patch, reverse=True):
            changed = [path for path in sorted(paths) if files[path] != base[path]]
            return "".join(_file_diff(path, base[path], files[path]) for path in changed)
    return None


VARIANTS: dict[str, Maker] = {
    "gold": lambda instance, read, peers: instance.patch,
    "empty": lambda instance, read, peers: "",
    "revert_hunk": revert_hunk,
    "break": break_import,
    "stale": stale,
    "malformed": lambda instance, read, peers: MALFORMED,
    "other_bug": other_bug,
}


def variant_predictions(
    store: Path, instances: list[Instance], names: list[str] | None = None
) -> dict[str, list[Prediction]]:
    """Per variant (the model name of its predictions), one prediction per instance it fits.

    Files are read at base_commit from a sandbox on the instance's cached layers.
    """
    from sweflow.envcache.builder import instance_sandbox_spec
    from sweflow.envcache.store import LayerStore
    from sweflow.sandbox import open_sandbox

    layers = LayerStore(store)
    out: dict[str, list[Prediction]] = {name: [] for name in names or VARIANTS}
    for instance in instances:
        with open_sandbox(instance_sandbox_spec(layers, instance.instance_id)) as sandbox:

            def read(path: str) -> str:
                return sandbox.read(f"/testbed/{path}").decode()

            for name in out:
                patch = VARIANTS[name](instance, read, instances)
                if patch is not None:
                    out[name].append(Prediction(instance.instance_id, patch, name))
    return out
