"""What a run did, measured against its task's gold patch: the behaviour a trained agent should
show before it resolves anything.

- ``valid_actions``: replies that parsed into an action, over all replies;
- ``reproduced``: it ran Python code (a script, ``python -c``, pytest) whose output shows the
  failure: a traceback, a failed assertion or a failing test;
- ``right_file``: it looked at a file the gold patch changes (the editor's view, or a command
  that prints it: cat, sed, head, tail, nl, less, grep on that file);
- ``edited``: it tried to change a file (the editor's ``str_replace``, ``insert`` or ``create``,
  or ``sed -i``), whether or not the edit went through;
- ``patched``: its final patch changes a file the repository had (files it only created, such as
  a reproduction script, do not count): an edit went through;
- ``right_hunk``: its patch changes a gold file inside the lines a gold hunk changes;
- ``submitted`` and ``resolved``: how it ended, and the grader's verdict;
- ``looped``: it gave the same action in :data:`LOOP` replies in a row (a small model's usual
  way to spend its step budget: the repeated reply makes the next repeat likelier).

A base model that never acts scores 0 everywhere; a model that learned to localise scores on
``right_file`` long before it resolves tasks, so these are the rates the learning benchmark and
the demo report beside the resolve rate. In order they are a funnel: where the counts drop is
what the model cannot yet do (find the file, try an edit, write one that applies, put it in the
right place, fix the bug).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from itertools import pairwise

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.agent.actions import same_actions
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import SUBMITTED, Trajectory
from sweflow.instances import Instance

RUNS_PYTHON = re.compile(r"(^|[\s;&|(])(python3?|pytest|py\.test)(\s|$)")
FAILURE = re.compile(r"Traceback \(most recent call last\)|AssertionError|\bFAILED\b|Error:")
VIEWERS = frozenset({"cat", "sed", "head", "tail", "nl", "less", "more", "grep", "awk"})
EDITS = frozenset({"str_replace", "insert", "create"})
LOOP = 3
# a run's behaviours in the order a run gets through them (the docstring's funnel)
FUNNEL = ("reproduced", "right_file", "edited", "patched", "right_hunk", "submitted", "resolved",
          "looped")  # fmt: skip


@dataclass
class RunScore:
    """One run's behaviour (see the module docstring)."""

    replies: int = 0
    valid_replies: int = 0
    reproduced: bool = False
    right_file: bool = False
    edited: bool = False
    patched: bool = False
    right_hunk: bool = False
    submitted: bool = False
    resolved: bool = False
    looped: bool = False


@dataclass
class Rates:
    """Rates over runs, each as a count and its share (valid actions: over replies)."""

    runs: int = 0
    replies: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        shares = {f"{name}_rate": round(count / max(self.runs, 1), 3)
                  for name, count in self.counts.items() if name != "valid_replies"}  # fmt: skip
        valid = round(self.counts.get("valid_replies", 0) / max(self.replies, 1), 3)
        return {"runs": self.runs, "replies": self.replies, **self.counts,
                "valid_action_rate": valid, **shares}  # fmt: skip


def score_run(trajectory: Trajectory, instance: Instance) -> RunScore:
    """How ``trajectory`` went on ``instance`` (its gold patch says where the bug is)."""
    gold = _hunks(instance.patch)
    score = RunScore(
        replies=len(trajectory.steps),
        valid_replies=sum(not step.format_error for step in trajectory.steps),
        submitted=trajectory.exit_status == SUBMITTED,
        resolved=trajectory.resolved,
        looped=_looped(trajectory),
    )
    for step in trajectory.steps:
        for action in step.actions:
            if action.tool == EDITOR and action.args.get("command") == "view":
                score.right_file |= _repo_path(str(action.args.get("path", ""))) in gold
            elif action.tool == EDITOR:
                score.edited |= action.args.get("command") in EDITS
            elif action.tool == BASH:
                command = str(action.args.get("command", ""))
                score.right_file |= _prints_a_file_of(command, gold)
                score.edited |= any(_sed_in_place(words) for words in _commands(command))
                score.reproduced |= bool(
                    RUNS_PYTHON.search(command) and FAILURE.search(action.observation)
                )
    changed = _hunks(trajectory.patch)
    score.patched = bool(_hunks(trajectory.patch, new=False))
    score.right_hunk = any(
        _overlap(span, gold_span)
        for path, spans in changed.items()
        for span in spans
        for gold_span in gold.get(path, [])
    )
    return score


def rates(scores: list[RunScore]) -> Rates:
    """Counts and shares of the runs' behaviours."""
    counts = {name: sum(int(getattr(s, name)) for s in scores)
              for name in ("valid_replies", *FUNNEL)}  # fmt: skip
    return Rates(runs=len(scores), replies=sum(s.replies for s in scores), counts=counts)


def _looped(trajectory: Trajectory) -> bool:
    """Whether :data:`LOOP` consecutive replies parsed into the same actions."""
    run = 1
    for before, step in pairwise(trajectory.steps):
        run = run + 1 if same_actions(step.actions, before.actions) else 1
        if run >= LOOP:
            return True
    return False


def _hunks(patch: str, new: bool = True) -> dict[str, list[tuple[int, int]]]:
    """Per changed file, the source line ranges its hunks change (a pure addition: the line);
    ``new=False`` leaves out files the patch creates."""
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError:
        return {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for file in files:
        if file.is_added_file and not new:
            continue
        for hunk in file:
            changed = [line.source_line_no or line.target_line_no for line in hunk
                       if line.is_added or line.is_removed]  # fmt: skip
            numbers = [n for n in changed if n is not None]
            if numbers:
                spans.setdefault(file.path, []).append((min(numbers), max(numbers)))
    return spans


def _overlap(a: tuple[int, int], b: tuple[int, int], slack: int = 2) -> bool:
    return a[0] <= b[1] + slack and b[0] <= a[1] + slack


def _repo_path(path: str) -> str:
    return path.removeprefix("/testbed/").removeprefix("./")


def _prints_a_file_of(command: str, gold: dict[str, list[tuple[int, int]]]) -> bool:
    """A viewer (cat, sed -n, head...) run on a gold file, in any part of a command line."""
    return any(
        words[0] in VIEWERS and any(_repo_path(w) in gold for w in words[1:])
        for words in _commands(command)
    )


def _sed_in_place(words: list[str]) -> bool:
    return words[0] == "sed" and any(w.startswith(("-i", "--in-place")) for w in words[1:])


def _commands(command: str) -> list[list[str]]:
    """The words of each simple command of a command line (split at ``&&``, ``;``, pipes)."""
    commands = []
    for part in re.split(r"&&|\|\||;|\||\n", command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if words:
            commands.append(words)
    return commands
