"""A unified git diff reversed, as text: SWE-smith rows carry the bug, and the task record's
``patch`` is the fix (what ``git apply --reverse`` of the bug does, written as a forward diff).
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
# header lines that come in pairs, old side first: after swapping, put them back in order
_PAIRS = {("+++", "---"), ("rename", "rename"), ("new", "old")}
_SWAPS = (
    ("new file mode ", "deleted file mode "),
    ("old mode ", "new mode "),
    ("rename from ", "rename to "),
)


def reverse_patch(patch: str) -> str:
    """``patch`` undone: old and new swapped in every header, hunk and line. ValueError for
    what cannot be reversed as text (binary or copy sections)."""
    out: list[str] = []
    block: list[str] = []  # the changed lines between two context lines
    in_hunk = False
    for line in patch.split("\n"):
        if in_hunk and line[:1] in ("+", "-", "\\"):
            block.append(line)
            continue
        out += _flush(block)
        block = []
        if in_hunk and line[:1] in (" ", ""):
            out.append(line)
            continue
        in_hunk = bool(_HUNK.match(line))
        out.append(_header(line))
        if len(out) > 1 and (out[-2].split(" ")[0], out[-1].split(" ")[0]) in _PAIRS:
            out[-2], out[-1] = out[-1], out[-2]  # keep git's order: old side first
    out += _flush(block)
    return "\n".join(out)


def _flush(block: list[str]) -> list[str]:
    """A change block reversed: what was added is removed (first), what was removed is added;
    a "\\ No newline" note stays after the line it follows."""
    removed: list[str] = []
    added: list[str] = []
    last: list[str] | None = None
    for line in block:
        if line.startswith("\\"):
            if last is not None:
                last.append(line)
            continue
        target = removed if line.startswith("+") else added
        target.append(("-" if line.startswith("+") else "+") + line[1:])
        last = target
    return removed + added


def _header(line: str) -> str:
    if line.startswith(("GIT binary patch", "Binary files ", "copy from ", "copy to ")):
        raise ValueError(f"a {line.split()[0]} section cannot be reversed as text")
    if line.startswith("diff --git "):
        match = re.fullmatch(r"diff --git a/(.*) b/(.*)", line)
        return f"diff --git a/{match[2]} b/{match[1]}" if match else line
    if line.startswith("index "):
        match = re.fullmatch(r"index (\w+)\.\.(\w+)(.*)", line)
        return f"index {match[2]}..{match[1]}{match[3]}" if match else line
    if line.startswith("--- "):
        return "+++ " + _side(line[4:], "b/")
    if line.startswith("+++ "):
        return "--- " + _side(line[4:], "a/")
    if match := _HUNK.match(line):
        return f"@@ -{match[2]} +{match[1]} @@{match[3]}"
    for one, other in _SWAPS:
        if line.startswith(one):
            return other + line[len(one) :]
        if line.startswith(other):
            return one + line[len(other) :]
    return line


def _side(path: str, prefix: str) -> str:
    """A ``---``/``+++`` path moved to the other side (a/ <-> b/, /dev/null kept)."""
    if path.startswith(("a/", "b/")):
        return prefix + path[2:]
    return path
