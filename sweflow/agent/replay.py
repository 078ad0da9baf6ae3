"""The ``replay`` teacher: an instance's gold patch reproduced through the agent's own tools.

A small model resolves none of the tasks, so collecting golden trajectories from it yields no
SFT data. The replay plays the part of the model in the real agent loop, in a real sandbox: it
looks at each place the gold patch changes (the editor's ``view``), edits it with the editor
(``str_replace`` per hunk, ``create`` for new files), runs the tests, and submits. Every
observation is the sandbox's real answer, and the run is graded like any other, so a replay
trajectory is exactly what the agent would have had to do, in the tool mode the student model
will be served in. When an edit's old text is not unique in its file, the replay widens it with
the lines the last ``view`` showed, as an agent would.

The test step runs the FAIL_TO_PASS tests' files that exist before the test patch (SWE-bench
rows), else the visible suite (SWE-smith style tasks hide the failing tests' files).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Generator
from typing import Any

from unidiff import PatchedFile, PatchSet
from unidiff.patch import Hunk

from sweflow.agent.actions import Action
from sweflow.agent.client import Completion
from sweflow.agent.config import ToolMode
from sweflow.agent.tools import BASH, EDITOR, SUBMIT
from sweflow.errors import ConfigError
from sweflow.harness.specs import SpecError, SpecTable
from sweflow.instances import Instance

CONTEXT_LINES = 6  # shown around a hunk by the view before its edit
DEFAULT_TESTS = "python -m pytest"  # the test step of a row without an environment spec
GIT_CONTEXT = 3  # context lines of a git diff's hunk, fewer only at the ends of a file
NOT_UNIQUE = "appears"  # the editor's word when old_str is found more than once
NUMBERED = re.compile(r"^ *(\d+)\t(.*)$")

Plan = Generator[tuple[str, Action], str, None]  # yields (thought, action), receives observation


class ReplayModel:
    """A model stand-in for one run: each :meth:`complete` answers with the plan's next step."""

    source = "replay"
    name = "replay"

    def __init__(self, instance: Instance, tool_mode: ToolMode, test_command: str) -> None:
        self.tool_mode = tool_mode
        self._plan = replay_plan(gold_files(instance), test_command)
        self._started = False
        self._calls = 0

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        began = time.perf_counter()
        observation = _last_observation(messages)
        try:
            if not self._started:
                self._started = True
                thought, action = next(self._plan)
            else:
                thought, action = self._plan.send(observation)
        except StopIteration:
            thought, action = "The change is made.", Action(SUBMIT)
        self._calls += 1
        return Completion(
            message=self._message(thought, action),
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=time.perf_counter() - began,
            finish_reason="tool_calls" if self.tool_mode == "tools" else "stop",
        )

    def _message(self, thought: str, action: Action) -> dict[str, Any]:
        if self.tool_mode == "text":
            return {"role": "assistant", "content": text_reply(thought, action)}
        call = {
            "id": f"call_replay_{self._calls}",
            "type": "function",
            "function": {"name": action.tool, "arguments": json.dumps(action.args)},
        }
        return {"role": "assistant", "content": thought, "tool_calls": [call]}

    async def close(self) -> None:
        self._plan.close()


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


def replay_plan(files: list[PatchedFile], test_command: str) -> Plan:
    """The steps that reproduce a patch, adapting to what the sandbox answers."""
    for patched in files:
        yield from _replay_file(patched)
    yield "Run the tests to check the change.", Action(BASH, {"command": test_command})
    yield "The change is made and checked; submit it.", Action(SUBMIT)


def _replay_file(patched: PatchedFile) -> Plan:
    path = f"/testbed/{patched.path}"
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
    for hunk in patched:
        view = {"command": "view", "path": path, "view_range": list(_view_range(hunk))}
        where = f"{patched.path} around line {hunk.source_start}"
        shown = yield f"Look at {where}.", Action(EDITOR, view)
        old = "".join(text for kind, text in _lines(hunk) if kind != "+")
        new = "".join(text for kind, text in _lines(hunk) if kind != "-")
        edit = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
        answer = yield f"Change the code at line {hunk.source_start}.", Action(EDITOR, edit)
        if NOT_UNIQUE in answer and (window := _window(shown)) and old in window:
            wide = {**edit, "old_str": window, "new_str": window.replace(old, new, 1)}
            yield "That text is not unique; replace it with more context.", Action(EDITOR, wide)


def _view_range(hunk: Hunk) -> tuple[int, int]:
    """Lines to view around a hunk: some context, but not past the end of the file, which a
    hunk reaches when it has fewer trailing context lines than git's three."""
    end = hunk.source_start + hunk.source_length - 1
    kinds = [kind for kind, _ in _lines(hunk)]
    trailing = len(kinds) - max(i for i, k in enumerate(kinds) if k != " ") - 1
    last = end if trailing < GIT_CONTEXT else end + CONTEXT_LINES
    return max(1, hunk.source_start - CONTEXT_LINES), max(last, 1)


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


def _window(observation: str) -> str:
    """The file text a ``view`` observation shows (its numbered lines, numbers removed)."""
    lines = [m.group(2) for m in map(NUMBERED.match, observation.splitlines()) if m]
    return "\n".join(lines) + "\n" if lines else ""


def _apply_action(patched: PatchedFile) -> Action:
    marker = "SWEFLOW_PATCH_END"
    return _bash(f"git apply <<'{marker}'\n{patched}{marker}")


def _bash(command: str) -> Action:
    return Action(BASH, {"command": command})


def _last_observation(messages: list[dict[str, Any]]) -> str:
    last = messages[-1] if messages else {}
    return str(last.get("content") or "") if last.get("role") in ("tool", "user") else ""


def replay_test_command(instance: Instance, base_command: str | list[str]) -> str:
    """The replay's test step: FAIL_TO_PASS files present before the test patch, or the suite.

    ``base_command`` is an environment spec's ``test_cmd``: one command the files are appended
    to, or a list of complete commands (run one after the other, as they are).
    """
    if isinstance(base_command, list):
        return " && ".join(base_command)
    try:
        hidden = {f.path for f in PatchSet(instance.test_patch or "") if f.is_added_file}
    except Exception:  # a malformed test patch hides nothing we can name
        hidden = set()
    files = sorted({name.split("::")[0] for name in instance.FAIL_TO_PASS if "::" in name})
    visible = [f for f in files if f not in hidden]
    return " ".join([quiet(base_command), *map(shlex.quote, visible)])


def quiet(test_command: str) -> str:
    """A pytest command with a short report (the harness's ``-rA`` lists every test), so the
    observation stays small; other test runners as they are."""
    words = shlex.split(test_command)
    if "pytest" not in words:
        return test_command
    kept = [w for w in words if w not in ("-rA", "-v", "-vv")]
    return " ".join(map(shlex.quote, [*kept, "-q", "--tb=short"]))


def replay_clients(
    rows: list[Instance], tool_mode: ToolMode, specs: SpecTable | None
) -> tuple[Callable[[Instance], ReplayModel], dict[str, str]]:
    """A Batch's ``client_for`` that replays each row, and {instance id: why not} for the rows
    whose gold patch cannot be replayed (checked here, before any sandbox opens). The test step
    uses the row's environment spec's test command (pytest for rows without a spec)."""
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
        return ReplayModel(row, tool_mode, replay_test_command(row, command or DEFAULT_TESTS))

    return client_for, skipped
