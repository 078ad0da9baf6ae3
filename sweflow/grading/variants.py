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
- ``empty``: no patch at all.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

from unidiff import PatchSet

from sweflow.grading.patches import is_test_path
from sweflow.grading.predictions import Prediction
from sweflow.instances import Instance

MALFORMED = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@ oops\n-a\n+b\n"
BREAK_LINE = 'raise ImportError("broken on purpose by sweflow.grading.variants")\n'

ReadFile = Callable[[str], str]  # a repository-relative path -> its text at base_commit


def revert_hunk(instance: Instance, read: ReadFile) -> str | None:
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


def break_import(instance: Instance, read: ReadFile) -> str | None:
    """A raise at the top of the first Python source file the gold patch modifies."""
    for f in PatchSet(instance.patch):
        if f.path.endswith(".py") and f.is_modified_file and not is_test_path(f.path):
            old = read(f.path).splitlines(keepends=True)
            body = difflib.unified_diff(old, [BREAK_LINE, *old], f"a/{f.path}", f"b/{f.path}")
            return f"diff --git a/{f.path} b/{f.path}\n" + "".join(body)
    return None


def stale(instance: Instance, read: ReadFile) -> str | None:
    """The gold patch with each removed line changed, so its hunks match no file."""
    lines = instance.patch.splitlines(keepends=True)
    out = [
        line[:-1] + "  # stale\n" if line.startswith("-") and not line.startswith("---") else line
        for line in lines
    ]
    return "".join(out) if out != lines else None


VARIANTS: dict[str, Callable[[Instance, ReadFile], str | None]] = {
    "gold": lambda instance, read: instance.patch,
    "empty": lambda instance, read: "",
    "revert_hunk": revert_hunk,
    "break": break_import,
    "stale": stale,
    "malformed": lambda instance, read: MALFORMED,
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
                patch = VARIANTS[name](instance, read)
                if patch is not None:
                    out[name].append(Prediction(instance.instance_id, patch, name))
    return out
