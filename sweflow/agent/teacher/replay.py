"""The ``replay`` teacher: an instance's gold patch reached and made through the agent's tools
the way a student could, from the issue alone.

A small model resolves none of the tasks, so collecting golden trajectories from it yields no
SFT data. The replay plays the part of the model in the real agent loop, in a real sandbox. It
knows the fix, but it moves only along clues (sweflow.agent.teacher.replay_route): it runs the
issue's reproduction, follows the traceback, searches for the names and messages the issue and its
observations show (the failing tests' subjects first), reads on from what it viewed, until a
view shows each place the gold patch changes; then it edits (``str_replace`` of the changed
lines per hunk, widened by the hunk's context until unique in the file, then by the viewed
lines; or, as the teacher's ``edits`` asks, ``replace_lines`` of the changed lines by the
numbers its views showed, a file's hunks from the bottom up so that those numbers hold), runs
the reproduction again and the tests, and submits. Short, uniform steps are what a
small student can learn. Every observation is the sandbox's real answer and the run is graded
like any other. A task whose changes no clue leads to is declined with the reason (exit status
``declined``), never given a step a student could not have taken.

The test step runs those of the FAIL_TO_PASS tests' files that exist before the test patch and
that the issue or an observation named, else the visible suite (SWE-smith style tasks hide the
failing tests' files).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from unidiff import PatchedFile, PatchSet
from unidiff.patch import Hunk

from sweflow.agent.actions import Action
from sweflow.agent.client import Completion, Declined, ModelError
from sweflow.agent.config import TeacherEdits, ToolMode
from sweflow.agent.teacher.clues import names_path, reproduction
from sweflow.agent.teacher.replay_route import MAX_COST, Knowledge, Router, Target
from sweflow.agent.teacher.source_map import SourceMap, read_sources
from sweflow.agent.tools import BASH, EDITOR, SUBMIT
from sweflow.errors import ConfigError
from sweflow.harness.specs import SpecError, SpecTable
from sweflow.instances import Instance
from sweflow.sandbox import Sandbox

DEFAULT_TESTS = "python -m pytest"  # the test step of a row without an environment spec
NOT_UNIQUE = "appears"  # the editor's word when old_str is found more than once

# a replay's steps: yields (thought, action), receives the observation
ReplayScript = Generator[tuple[str, Action], str, None]
REPRODUCE = "Let me run the reproduction from the issue to see the failure for myself."


class ReplayModel:
    """A model stand-in for one run: each :meth:`complete` answers with the plan's next step.
    The plan is made once the repository is read (:meth:`prepare`, called by the loop)."""

    source = "replay"
    name = "replay"

    def __init__(
        self,
        instance: Instance,
        tool_mode: ToolMode,
        check: Check,
        max_steps: int | None = None,
        edits: TeacherEdits = "str_replace",
    ) -> None:
        self.instance = instance
        self.tool_mode = tool_mode
        self.check = check
        self.max_steps = max_steps  # the agent's: a replay cut short by it teaches no submit
        self.edits = edits
        self._plan: ReplayScript | None = None
        self._started = False
        self._calls = 0

    async def prepare(self, sandbox: Sandbox, workdir: str) -> None:
        source = SourceMap(await read_sources(sandbox, workdir))
        self._plan = replay_plan(self.instance, self.check, source, workdir, self.edits)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        if self._plan is None:
            raise ModelError("the replay teacher runs in the agent loop, which reads the repo")
        began = time.perf_counter()
        observation = last_observation(messages)
        try:
            if not self._started:
                self._started = True
                thought, action = next(self._plan)
            else:
                thought, action = self._plan.send(observation)
        except StopIteration:
            thought, action = "The change is made.", Action(SUBMIT)
        last = self.max_steps is not None and self._calls + 1 >= self.max_steps
        if last and action.tool != SUBMIT:
            raise Declined(f"the replay needs more than the agent's {self.max_steps} steps")
        self._calls += 1
        return Completion(
            message=self._message(thought, action),
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=time.perf_counter() - began,
            finish_reason="tool_calls" if self.tool_mode == "tools" else "stop",
        )

    def _message(self, thought: str, action: Action) -> dict[str, Any]:
        return reply_message(thought, action, self.tool_mode, self._calls)

    async def close(self) -> None:
        if self._plan is not None:
            self._plan.close()


def reply_message(thought: str, action: Action, tool_mode: str, number: int) -> dict[str, Any]:
    """The teacher's reply as an assistant message of ``tool_mode`` (``number``: its call id)."""
    if tool_mode == "text":
        return {"role": "assistant", "content": text_reply(thought, action)}
    call = {
        "id": f"call_replay_{number}",
        "type": "function",
        "function": {"name": action.tool, "arguments": json.dumps(action.args)},
    }
    return {"role": "assistant", "content": thought, "tool_calls": [call]}


def text_reply(thought: str, action: Action) -> str:
    """A text-mode reply: the thought, then the action's command line in one bash block."""
    return f"THOUGHT: {thought}\n\n```bash\n{action.command_line()}\n```"


class ReplayError(ConfigError):
    """An instance whose gold patch cannot be replayed (the message names it)."""


def gold_files(instance: Instance) -> list[PatchedFile]:
    """The files of the instance's gold patch, or a ReplayError naming the instance."""
    try:
        files = list(PatchSet(instance.patch or ""))
    except Exception as exc:  # unidiff raises its own errors for a malformed patch
        raise ReplayError(f"{instance.instance_id}: its gold patch cannot be read: {exc}") from None
    if not files:
        raise ReplayError(f"{instance.instance_id}: its gold patch is empty")
    return files


def replay_plan(
    instance: Instance,
    check: Check,
    source: SourceMap,
    workdir: str,
    edits: TeacherEdits = "str_replace",
) -> ReplayScript:
    """The steps: reproduce, find every place to change by clues, edit (with ``edits``),
    check, submit."""
    files = gold_files(instance)
    known = Knowledge(instance.problem_statement, workdir)
    router = Router(source, workdir)
    script = reproduction(instance.problem_statement)
    if script is not None:
        known.learn(None, (yield REPRODUCE, run_script(script)))
    for patched in files:
        for target in targets(patched):
            while known.shown(target) is None:
                move = router.next_move(known, target)
                if move is None:
                    raise Declined(_unreachable(target, source))
                known.learn(move, (yield move.thought, move.action))
    for patched in files:
        yield from _edit_file(patched, known, source, workdir, edits)
    if script is not None:
        yield "Run the reproduction again to check the fix.", run_script(script)
    yield "Run the tests to check that nothing else broke.", _bash(check.line(known.text, workdir))
    yield "The change is made and checked; submit it.", Action(SUBMIT)


def next_step(
    instance: Instance,
    known: Knowledge,
    router: Router,
    source: SourceMap,
    workdir: str,
    reproduced: bool,
    edits: TeacherEdits = "str_replace",
) -> tuple[str, Action] | None:
    """What the teacher does next from a state before any edit that ``known`` describes (a
    student's, sweflow.agent.teacher.corrections): run the issue's reproduction if that was not
    done, move towards the first hunk not fully seen, else make the first edit (with ``edits``,
    as its own replay would); None where it sees no way on (it would decline here)."""
    script = reproduction(instance.problem_statement)
    if script is not None and not reproduced:
        return REPRODUCE, run_script(script)
    files = gold_files(instance)
    for target in (t for patched in files for t in targets(patched)):
        if known.shown(target) is None:
            move = router.next_move(known, target)
            return None if move is None else (move.thought, move.action)
    try:
        return next(_edit_file(files[0], known, source, workdir, edits))
    except Declined:
        return None


def targets(patched: PatchedFile) -> list[Target]:
    """The lines each hunk of a modified text file covers (none for other kinds of change)."""
    if _whole_file_change(patched):
        return []
    return [
        Target(patched.path, h.source_start, h.source_start + h.source_length - 1) for h in patched
    ]


def _whole_file_change(patched: PatchedFile) -> bool:
    """A file added, removed, renamed or binary: no hunk of it is edited in place."""
    return bool(
        patched.is_binary_file
        or patched.is_rename
        or patched.is_added_file
        or patched.is_removed_file
    )


def _unreachable(target: Target, source: SourceMap) -> str:
    where = f"{target.path} lines {target.first}-{target.last}"
    if target.path not in source.lines:
        return f"no clue leads into {target.path}: it is not Python source outside the tests"
    return (
        f"no clue leads to {where}: nothing the issue or the observations name reaches it "
        f"within {MAX_COST} actions"
    )


def run_script(script: str) -> Action:
    """Feed a script to Python on stdin (nothing is written to the repository)."""
    end = "EOF"
    while re.search(rf"^{end}$", script, re.MULTILINE):
        end += "_"
    return _bash(f"python - <<'{end}'\n{script.rstrip()}\n{end}")


def _edit_file(
    patched: PatchedFile, known: Knowledge, source: SourceMap, workdir: str, edits: TeacherEdits
) -> ReplayScript:
    """The file's edits with ``edits``: line edits of its hunks, else ``str_replace`` (and a whole
    file added, removed, renamed or binary the one way each can be)."""
    if edits == "replace_lines" and not _whole_file_change(patched):
        return _replace_lines(patched, source, workdir)
    return _replay_file(patched, known, source, workdir)


def _replay_file(
    patched: PatchedFile, known: Knowledge, source: SourceMap, workdir: str
) -> ReplayScript:
    path = f"{workdir.rstrip('/')}/{patched.path}"
    if _whole_file_change(patched) and not names_path(known.text, patched.path, workdir):
        raise Declined(f"the gold patch changes {patched.path}, which nothing names")
    if patched.is_binary_file or patched.is_rename:
        yield f"Apply the change to {patched.path} as a patch.", _apply_action(patched)
        return
    if patched.is_removed_file:
        yield f"{patched.path} is not needed any more.", _bash(f"rm {shlex.quote(path)}")
        return
    if patched.is_added_file:
        content = "".join(text for kind, text in _lines(patched[0]) if kind == "+")
        args = {"command": "create", "path": path, "file_text": content}
        yield f"Create {patched.path}.", Action(EDITOR, args)
        return
    done: list[tuple[str, str]] = []  # (old, new) of this file's edits so far
    text = "\n".join(source.lines.get(patched.path, []))  # the file with the edits so far
    for hunk, target in zip(patched, targets(patched), strict=True):
        shown = known.shown(target)
        assert shown is not None  # every target was viewed before the edits
        window = shown
        for before, after in done:
            window = window.replace(before, after, 1)
        where = _where(source, patched.path, _first_change(hunk))
        old, new = smallest_edit(hunk, text)
        edit = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
        thought = f"This code in {where} is what goes wrong; change it."
        answer = yield thought, Action(EDITOR, edit)
        if NOT_UNIQUE in answer and old in window:
            wide = {**edit, "old_str": window, "new_str": window.replace(old, new, 1)}
            yield "That text is not unique; replace it with more context.", Action(EDITOR, wide)
            done.append((window, wide["new_str"]))
        else:
            done.append((old, new))
        text = text.replace(*done[-1], 1)


def _replace_lines(patched: PatchedFile, source: SourceMap, workdir: str) -> ReplayScript:
    """The file's hunks as ``replace_lines`` edits, the last first: each names lines as the
    views numbered them, which the edits below them do not move."""
    path = f"{workdir.rstrip('/')}/{patched.path}"
    for hunk in reversed(list(patched)):
        first, last, new = line_edit(hunk)
        where = _where(source, patched.path, first)
        edit = {"command": "replace_lines", "path": path, "line_range": [first, last]}
        thought = f"Lines {first}-{last} in {where} are what goes wrong; replace them."
        yield thought, Action(EDITOR, {**edit, "new_str": new})


def _where(source: SourceMap, path: str, line: int) -> str:
    """How an edit's thought names the place of ``line``: its definition, else its file."""
    holder = source.enclosing(path, line)
    return f"`{holder.name}`" if holder else path


def line_edit(hunk: Hunk) -> tuple[int, int, str]:
    """The hunk as (first, last, new): the lines its changes span (before the change) and their
    new text. A hunk that only adds lines takes in the context line above them (below, at the
    top of a file), since a range names at least one line."""
    lines = _lines(hunk)
    changed = [i for i, (kind, _) in enumerate(lines) if kind != " "]
    start, end = changed[0], changed[-1]
    if all(lines[i][0] == "+" for i in range(start, end + 1)):
        context = [i for i, (kind, _) in enumerate(lines) if kind == " "]
        if not context:
            raise Declined("a hunk with no line before the change to name: use str_replace")
        above = [i for i in context if i < start]
        start, end = (above[-1], end) if above else (start, min(i for i in context if i > end))
    number = hunk.source_start + sum(kind != "+" for kind, _ in lines[:start])
    old_count = sum(kind != "+" for kind, _ in lines[start : end + 1])
    new = "".join(text for kind, text in lines[start : end + 1] if kind != "-")
    return number, number + old_count - 1, new


def smallest_edit(hunk: Hunk, text: str) -> tuple[str, str]:
    """The hunk as (old, new) text: its changed lines, widened one context line each side at a
    time until ``old`` appears once in the file's ``text``; the whole hunk when nothing smaller
    is unique. Short edits are what a student can learn to write (and cost fewer tokens)."""
    lines = _lines(hunk)
    changed = [i for i, (kind, _) in enumerate(lines) if kind != " "] or [0]
    first, last = changed[0], changed[-1]
    while True:
        part = lines[first : last + 1]
        old = "".join(line for kind, line in part if kind != "+")
        new = "".join(line for kind, line in part if kind != "-")
        whole = first == 0 and last == len(lines) - 1
        if whole or (old.strip() and text.count(old) == 1):
            return old, new
        first, last = max(first - 1, 0), min(last + 1, len(lines) - 1)


def _first_change(hunk: Hunk) -> int:
    """The first line (before the change) that the hunk removes, or the line it adds after."""
    line = hunk.source_start
    for kind, _ in _lines(hunk):
        if kind != " ":
            return line
        line += 1
    return line


def _lines(hunk: Hunk) -> list[tuple[str, str]]:
    """(kind, text) of a hunk's lines, kind "+", "-" or " ". A "no newline at end of file"
    marker is dropped and takes the newline off the line before it."""
    lines: list[tuple[str, str]] = []
    for line in hunk:
        if line.line_type == "\\":
            if lines:
                lines[-1] = (lines[-1][0], lines[-1][1].rstrip("\n"))
            continue
        lines.append((line.line_type, line.value))
    return lines


def _apply_action(patched: PatchedFile) -> Action:
    marker = "SWEFLOW_PATCH_END"
    return _bash(f"git apply <<'{marker}'\n{patched}{marker}")


def _bash(command: str) -> Action:
    return Action(BASH, {"command": command})


def last_observation(messages: list[dict[str, Any]]) -> str:
    """The content of the conversation's last tool or user message (what the step answered)."""
    last = messages[-1] if messages else {}
    return str(last.get("content") or "") if last.get("role") in ("tool", "user") else ""


@dataclass(frozen=True)
class Check:
    """The replay's test step: a test command, and the visible failing tests' files it may
    run. Only the files the issue or an observation named go on the line: a student runs what it
    knows of; with none named, the command runs the whole visible suite."""

    command: str
    files: tuple[str, ...] = ()

    def line(self, seen: str, workdir: str) -> str:
        named = [f for f in self.files if names_path(seen, f, workdir)]
        return " ".join([self.command, *map(shlex.quote, named)])


def replay_check(instance: Instance, base_command: str | list[str]) -> Check:
    """The test step of a row: its FAIL_TO_PASS files present before the test patch (SWE-bench
    rows; SWE-smith style rows hide them all), with the spec's command made quiet.

    ``base_command`` is an environment spec's ``test_cmd``: one command the files are appended
    to, or a list of complete commands (run one after the other, as they are).
    """
    if isinstance(base_command, list):
        return Check(" && ".join(base_command))
    try:
        hidden = {f.path for f in PatchSet(instance.test_patch or "") if f.is_added_file}
    except Exception:  # a malformed test patch hides nothing we can name
        hidden = set()
    files = sorted({name.split("::")[0] for name in instance.FAIL_TO_PASS if "::" in name})
    return Check(quiet(base_command), tuple(f for f in files if f not in hidden))


def quiet(test_command: str) -> str:
    """A pytest command with a short report (the harness's ``-rA`` lists every test), so the
    observation stays small; other test runners as they are."""
    words = shlex.split(test_command)
    if "pytest" not in words:
        return test_command
    kept = [w for w in words if w not in ("-rA", "-v", "-vv")]
    return " ".join(map(shlex.quote, [*kept, "-q", "--tb=short"]))


def replay_clients(
    rows: list[Instance],
    tool_mode: ToolMode,
    specs: SpecTable | None,
    max_steps: int | None = None,
    edits: TeacherEdits = "str_replace",
) -> tuple[Callable[[Instance], ReplayModel], dict[str, str]]:
    """A Batch's ``client_for`` that replays each row (its edits made with the editor command
    ``edits``), and {instance id: why not} for the rows whose gold patch cannot be replayed
    (checked here, before any sandbox opens). The test step uses the row's environment spec's
    test command (pytest for rows without a spec); a replay that would not submit within the
    agent's ``max_steps`` is declined."""
    skipped: dict[str, str] = {}
    for row in rows:
        try:
            gold_files(row)
        except ReplayError as exc:
            skipped[row.instance_id] = str(exc)

    def client_for(row: Instance) -> ReplayModel:
        try:
            command = specs.get(row.repo, row.version or "").test_cmd if specs else DEFAULT_TESTS
        except SpecError:
            command = DEFAULT_TESTS
        check = replay_check(row, command or DEFAULT_TESTS)
        return ReplayModel(row, tool_mode, check, max_steps, edits)

    return client_for, skipped
