"""``majority``: the most common patch among a task's samples (self-consistency).

Two patches count as the same when they change the same files' lines the same way: compared by
their changed lines only, after unidiff has parsed them, so context lines, hunk offsets and
``index`` lines do not matter, and each changed line's whitespace is collapsed. Files a
sample only created (its reproduction script) are left out of the comparison, as every sample
writes its own. Empty patches (and those that change no file the repository had) do not vote
while any sample changed something. The largest group wins; a tie goes to the group whose
first member came first, and the pick is that group's first sample.
"""

from __future__ import annotations

import re

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.agent.runs.selectors import SelectorContext
from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView

Key = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
SPACES = re.compile(r"\s+")


def changed_lines(patch: str) -> Key:
    """A patch's identity for voting: per file it changes (the repository's own files, sorted),
    its removed and added lines in order, whitespace collapsed; () for none or unparseable."""
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError:
        return ()
    key = []
    for file in files:
        if file.is_added_file:
            continue
        lines = tuple(
            ("+" if line.is_added else "-", SPACES.sub(" ", line.value).strip())
            for hunk in file
            for line in hunk
            if line.is_added or line.is_removed
        )
        lines = tuple(line for line in lines if line[1])  # blank lines added or removed
        if lines:
            key.append((file.path, lines))
    return tuple(sorted(key))


class Majority:
    def __init__(self, context: SelectorContext) -> None:
        self.context = context

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        ordered = sorted(candidates, key=lambda c: c.index)
        keys = {c.index: changed_lines(c.patch) for c in ordered}
        groups: dict[Key, list[int]] = {}
        for c in ordered:
            if keys[c.index]:
                groups.setdefault(keys[c.index], []).append(c.index)
        if not groups:
            return Choice(ordered[0].index, {}, "no sample changed a file: the first")
        members = max(groups.values(), key=len)  # max keeps the first of equal lengths
        votes = {index: len(groups.get(keys[index], [])) for index in keys}
        note = f"{len(members)} of {len(ordered)} samples make this change ({len(groups)} distinct)"
        return Choice(members[0], votes, note)
