"""What a run did, measured against its task's gold patch: the behaviour a trained agent should
show before it resolves anything.

- ``valid_actions``: replies that parsed into an action, over all replies;
- ``reproduced``: it ran the issue's own reproduction and saw the failure the issue names: a
  traceback through the reproduction's entry function ending in the issue's error (a script
  that does not even parse, or fails another way, does not count);
- ``right_file``: an action showed the lines a gold hunk changes (the editor's view of a gold
  file whose range covers them, or a command that printed them: cat, sed -n, grep...); naming
  a gold file is not enough, since a blind view of a project's usual suspects would score;
  ``right_file_precision`` is its share of all views (gold views over views);
- ``edited``: it tried to change a file (the editor's ``str_replace``, ``replace_lines``,
  ``insert`` or ``create``, or ``sed -i``), whether or not the edit went through;
- ``patched``: its final patch changes a file the repository had (files it only created, such as
  a reproduction script, do not count): an edit went through;
- ``right_hunk``: its patch changes a gold file inside the lines a gold hunk changes;
- ``submitted``: it submitted a non-empty patch; ``resolved``: the grader's verdict;
- ``looped``: it gave the same action in :data:`LOOP` replies in a row (a small model's usual
  way to spend its step budget: the repeated reply makes the next repeat likelier).

A base model that never acts scores 0 everywhere; a model that learned to localise scores on
``right_file`` long before it resolves tasks, so these are the rates the learning benchmark and
the demo report beside the resolve rate. In order they are a funnel: where the counts drop is
what the model cannot yet do (find the file, try an edit, write one that applies, put it in the
right place, fix the bug). :func:`breakdown` gives the rates per project and per bug operator.
"""

from __future__ import annotations

import re
import shlex
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.agent.actions import same_actions
from sweflow.agent.teacher.clues import reproduction
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import SUBMITTED, ActionRecord, Trajectory
from sweflow.instances import Instance

RUNS_PYTHON = re.compile(r"(^|[\s;&|(])(python3?|pytest|py\.test)(\s|$)")
VIEWERS = frozenset({"cat", "sed", "head", "tail", "nl", "less", "more", "grep", "awk"})
EDITS = frozenset({"str_replace", "replace_lines", "insert", "create"})
LOOP = 3
TRACEBACK = "Traceback (most recent call last)"
# "(it is `path::test` on its own)" and "- `path::test`: message": how synthesized issues name
# the test their reproduction runs and how it fails (sweflow.synth's statements)
REPRODUCED_TEST = re.compile(r"\(it is `(?P<test>[^`]+)` on its own\)")
# the function the reproduction's last line runs: test_x(), Case("test_x").debug(), Case().test_x()
ENTRY = re.compile(r"""["'](test\w*)["']|\.(test\w*)\(|^(\w+)\(""")
# a run's behaviours in the order a run gets through them (the docstring's funnel)
FUNNEL = (
    "reproduced",
    "right_file",
    "edited",
    "patched",
    "right_hunk",
    "submitted",
    "resolved",
    "looped",
)


@dataclass
class RunScore:
    """One run's behaviour (see the module docstring)."""

    replies: int = 0
    valid_replies: int = 0
    views: int = 0  # actions that showed a file's lines
    gold_views: int = 0  # of those, the ones that showed a gold hunk's lines
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
    """Rates over runs, each as a count and its share (valid actions: over replies; the
    right file's precision: gold views over views)."""

    runs: int = 0
    replies: int = 0
    views: int = 0
    gold_views: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        shares = {
            f"{name}_rate": round(count / max(self.runs, 1), 3)
            for name, count in self.counts.items()
            if name != "valid_replies"
        }
        valid = round(self.counts.get("valid_replies", 0) / max(self.replies, 1), 3)
        return {
            "runs": self.runs,
            "replies": self.replies,
            **self.counts,
            "views": self.views,
            "gold_views": self.gold_views,
            "valid_action_rate": valid,
            **shares,
            "right_file_precision": round(self.gold_views / max(self.views, 1), 3),
        }


@dataclass(frozen=True)
class Failure:
    """What running an issue's reproduction shows when the bug is there: a traceback through
    ``entry`` (the function its last line calls) ending in ``error`` (an exception's name, and
    its message when the issue gives one)."""

    entry: str | None
    error: str
    message: str = ""

    def shown_in(self, output: str) -> bool:
        if TRACEBACK not in output:
            return False
        if self.entry and not re.search(rf", in {re.escape(self.entry)}\b", output):
            return False
        last = _last_exception(output)
        return last is not None and last[0] == self.error and self.message in last[1]


def expected_failure(statement: str) -> Failure | None:
    """How the issue's reproduction fails, from a synthesized issue's text: its entry function
    and the error listed for the test it runs; None when the issue names no reproduction."""
    script = reproduction(statement)
    if script is None:
        return None
    lines = [line.strip() for line in script.strip().splitlines()]
    found = ENTRY.search(lines[-1]) if lines else None
    entry = next((g for g in found.groups() if g), None) if found else None
    test = REPRODUCED_TEST.search(statement)
    said = re.search(rf"^- `{re.escape(test['test'])}`: (.+)$", statement, re.M) if test else None
    if said is None:
        return Failure(entry, "", "") if entry else None
    message = said[1].strip()
    if message.startswith("assert"):  # pytest's rewritten assert: a plain run raises it bare
        return Failure(entry, "AssertionError")
    error, _, text = message.partition(": ")
    return Failure(entry, error.rsplit(".", 1)[-1], text.strip()[:40])


def score_run(trajectory: Trajectory, instance: Instance) -> RunScore:
    """How ``trajectory`` went on ``instance`` (its gold patch says where the bug is)."""
    gold = _hunks(instance.patch)
    shown = _gold_lines(instance.patch)
    failure = expected_failure(instance.problem_statement)
    score = RunScore(
        replies=len(trajectory.steps),
        valid_replies=sum(not step.format_error for step in trajectory.steps),
        submitted=trajectory.exit_status == SUBMITTED and bool(trajectory.patch.strip()),
        resolved=trajectory.resolved,
        looped=_looped(trajectory),
    )
    for step in trajectory.steps:
        for action in step.actions:
            command = str(action.args.get("command", ""))
            if action.tool == EDITOR and command == "view" or _is_viewer(action):
                score.views += 1
                if _showed_gold(action, shown):
                    score.gold_views += 1
                    score.right_file = True
            if action.tool == EDITOR:
                score.edited |= command in EDITS
            elif action.tool == BASH:
                score.edited |= any(_sed_in_place(words) for words in _commands(command))
                score.reproduced |= bool(
                    failure is not None
                    and RUNS_PYTHON.search(command)
                    and failure.shown_in(action.observation)
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
    counts = {
        name: sum(int(getattr(s, name)) for s in scores) for name in ("valid_replies", *FUNNEL)
    }
    return Rates(
        runs=len(scores),
        replies=sum(s.replies for s in scores),
        views=sum(s.views for s in scores),
        gold_views=sum(s.gold_views for s in scores),
        counts=counts,
    )


def breakdown(scored: list[tuple[Instance, RunScore]]) -> dict[str, dict[str, dict]]:
    """The rates per project (``repo``) and per bug operator (a synthesized task's
    ``synth.operator``; "unknown" for other tasks): where a model's rate comes from."""
    keys: dict[str, Callable[[Instance], str]] = {
        "project": lambda i: i.repo,
        "operator": _operator,
    }
    result: dict[str, dict[str, dict]] = {}
    for name, key in keys.items():
        groups: dict[str, list[RunScore]] = defaultdict(list)
        for instance, score in scored:
            groups[key(instance)].append(score)
        result[name] = {group: rates(groups[group]).as_dict() for group in sorted(groups)}
    return result


def _operator(instance: Instance) -> str:
    synth = getattr(instance, "synth", None)
    return str(synth.get("operator", "unknown")) if isinstance(synth, dict) else "unknown"


def _last_exception(output: str) -> tuple[str, str] | None:
    """The exception that ends the last traceback of ``output``: (its class name, its message)."""
    tail = output[output.rindex(TRACEBACK) :]
    for line in reversed(tail.splitlines()):
        found = re.match(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$", line.strip())
        if found and (found[1].endswith(("Error", "Exception", "Exit")) or found[2] is not None):
            return found[1].rsplit(".", 1)[-1], found[2] or ""
    return None


def _is_viewer(action: ActionRecord) -> bool:
    if action.tool != BASH:
        return False
    return any(words[0] in VIEWERS for words in _commands(str(action.args.get("command", ""))))


def _showed_gold(action: ActionRecord, shown: list[tuple[str, list[str]]]) -> bool:
    """Whether ``action`` printed every changed line of some gold hunk (its file named in the
    action or its output)."""
    named = f"{action.args.get('path', '')} {action.args.get('command', '')} {action.observation}"
    seen = {line.strip() for line in action.observation.splitlines()}
    seen |= {re.sub(r"^\s*\d+\t", "", line).strip() for line in action.observation.splitlines()}
    seen |= {line.split(":", 2)[-1].strip() for line in action.observation.splitlines()}
    return any(
        path in named and all(line in seen for line in lines) for path, lines in shown if lines
    )


def _gold_lines(patch: str) -> list[tuple[str, list[str]]]:
    """Per gold hunk, its file and the lines it changes as the buggy file has them (for a pure
    addition, the lines around it), stripped and without blanks."""
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError:
        return []
    hunks = []
    for file in files:
        for hunk in file:
            lines = list(hunk)
            removed = [line.value.strip() for line in lines if line.is_removed]
            if not removed:
                first = next(i for i, line in enumerate(lines) if line.is_added)
                last = max(i for i, line in enumerate(lines) if line.is_added)
                removed = [
                    lines[i].value.strip()
                    for i in (first - 1, last + 1)
                    if 0 <= i < len(lines) and lines[i].is_context
                ]
            hunks.append((file.path, [line for line in removed if line]))
    return hunks


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
            changed = [
                line.source_line_no or line.target_line_no
                for line in hunk
                if line.is_added or line.is_removed
            ]
            numbers = [n for n in changed if n is not None]
            if numbers:
                spans.setdefault(file.path, []).append((min(numbers), max(numbers)))
    return spans


def _overlap(a: tuple[int, int], b: tuple[int, int], slack: int = 2) -> bool:
    return a[0] <= b[1] + slack and b[0] <= a[1] + slack


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
