"""SWE-agent 0.x trajectories as nebius published them (``nebius/SWE-agent-trajectories``, the
SWE-rebench-era set): a ``trajectory`` list of ``{"role": "system"|"user"|"ai", "text"}``, each
ai turn a DISCUSSION and one command in a bare fenced block, each user turn the command's output
followed by SWE-agent's prompt (``(Open file: ...)``, ``(Current directory: ...)``, ``bash-$``).

SWE-agent 0.x had its own windowed interface (its system prompt lists it): ``open``, ``goto``,
``scroll_up``/``scroll_down`` show 100 numbered lines of a file, ``edit A:B`` replaces lines A..B
with the text up to ``end_of_edit``, ``create``, ``find_file``, ``search_dir``/``search_file``,
``submit``; anything else is bash. A command becomes a sweflow action only where sweflow's tool
prints what SWE-agent's printed, and its observation is rewritten to sweflow's form:

- a window (``open``/``goto``/``scroll_*``) is ``str_replace_editor view`` of the lines it shows;
- ``edit A:B`` is ``str_replace`` of lines A..B as the last window of that file showed them (an
  edit of lines not shown, one SWE-agent's linter rejected, or whose result is not shown whole,
  is refused);
- ``create F`` is ``str_replace_editor create`` of an empty file; ``find_file`` is ``find``;
- ``search_dir``/``search_file`` print per-file match counts no sweflow tool prints: refused;
- a bash command's output loses SWE-agent's prompt (and its "ran successfully and did not
  produce any output" note, where sweflow's bash prints nothing).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sweflow.agent.actions import Action
from sweflow.agent.editor import SNIPPET_LINES, numbered
from sweflow.agent.tools import BASH, EDITOR, SUBMIT
from sweflow.training.sft.sources.episode import Episode, Refused
from sweflow.training.sft.sources.swe_smith import repo_of
from sweflow.training.sft.sources.turns import Turn, steps_of

ISSUE = re.compile(r"ISSUE:\n(.*?)\n+INSTRUCTIONS:", re.DOTALL)
COMMAND = re.compile(r"```[^\n]*\n(.*?)\n?```", re.DOTALL)
FOOTER = re.compile(
    r"\n*\(Open file: ([^\n]*)\)\n\(Current directory: ([^\n]*)\)\n[^\n]*\$\s*\Z", re.DOTALL
)
NO_OUTPUT = "Your command ran successfully and did not produce any output."
HEADER = re.compile(r"^\[File: (.+) \((\d+) lines total\)\]$", re.MULTILINE)
LINE = re.compile(r"^(\d+):(.*)$")
EDIT = re.compile(r"\Aedit (\d+):(\d+)\n(.*?)\n?end_of_edit\s*\Z", re.DOTALL)
WINDOWED = ("open", "goto", "scroll_up", "scroll_down")
REJECTED = ("Your proposed edit has introduced new syntax error", "Your changes have NOT been")


@dataclass
class Window:
    """The last lines SWE-agent showed of a file: line number -> text, and the file's length."""

    path: str
    lines: dict[int, str] = field(default_factory=dict)
    total: int = 0


def window_of(text: str) -> Window | None:
    header = HEADER.search(text)
    if header is None:
        return None
    shown = Window(header.group(1), total=int(header.group(2)))
    for line in text[header.end() :].split("\n"):
        if match := LINE.match(line):
            shown.lines[int(match.group(1))] = match.group(2)
    return shown if shown.lines else None


def episode(row: dict[str, Any]) -> Episode:
    trajectory = row.get("trajectory")
    if not isinstance(trajectory, list) or not trajectory:
        raise Refused("no trajectory")
    texts = [(m.get("role"), m.get("text") or "") for m in trajectory if isinstance(m, dict)]
    task = next((t for role, t in texts if role == "user"), "")
    issue = ISSUE.search(task)
    if issue is None:
        raise Refused("the task message has no ISSUE: ... INSTRUCTIONS: section")
    start = next(i for i, (role, t) in enumerate(texts) if role == "user" and t == task)
    state, turns = _State(), []
    waiting: tuple[str, str] | None = None  # (thought, command) of the ai turn before its output
    for role, text in [*texts[start + 1 :], ("end", "")]:
        where = f"turn {len(turns) + 1}"
        if waiting is not None and role != "user":
            if waiting[1].strip() != SUBMIT:
                raise Refused(f"{where}: a command with no output after it")
            turns.append(Turn(waiting[0], [Action(SUBMIT, {})]))
            waiting = None
        if role == "ai":
            waiting = _split(text, where)
        elif role == "user" and waiting is not None:
            turns.append(state.turn(*waiting, text, where))
            waiting = None
    if state.workdir is None:
        raise Refused("no observation names the working directory")
    instance = str(row.get("instance_id", ""))
    return Episode(
        instance, issue.group(1).strip(), state.workdir, steps_of(turns), repo_of(instance)
    )


def _split(text: str, where: str) -> tuple[str, str]:
    """(DISCUSSION, the command) of an ai turn: its last fenced block is the command."""
    blocks = list(COMMAND.finditer(text))
    if not blocks:
        raise Refused(f"{where}: no command block")
    return text[: blocks[-1].start()].strip(), blocks[-1].group(1)


class _State:
    """What SWE-agent's session held between turns: the folder, and the last window per file."""

    def __init__(self) -> None:
        self.workdir: str | None = None
        self.cwd = "/"
        self.windows: dict[str, Window] = {}

    def turn(self, thought: str, command: str, output: str, where: str) -> Turn:
        footer = FOOTER.search(output)
        if footer:
            output = output[: footer.start()]
            self.cwd = footer.group(2).strip()
            self.workdir = self.workdir or self.cwd
        output = "" if output.strip() == NO_OUTPUT else output
        action, observation = self._converted(command, output, where)
        return Turn(thought, [action], [observation])

    def _converted(self, command: str, output: str, where: str) -> tuple[Action, str]:
        name = command.split(maxsplit=1)[0] if command.strip() else ""
        if name == SUBMIT:
            return Action(SUBMIT, {}), output
        if name in WINDOWED:
            return self._view(output, where)
        if name == "edit":
            return self._edit(command, output, where)
        if name == "create":
            path = posixpath.join(self.cwd, command.split(maxsplit=1)[1].strip())
            if (shown := window_of(output)) is not None:
                self.windows[shown.path] = shown
            args = {"command": "create", "path": path, "file_text": ""}
            return Action(EDITOR, args), f"File created successfully at: {path}"
        if name == "find_file":
            return self._find(command, output, where)
        if name in ("search_dir", "search_file"):
            raise Refused(f"{where}: SWE-agent's {name} prints match counts no sweflow tool prints")
        return Action(BASH, {"command": command}), output

    def _view(self, output: str, where: str) -> tuple[Action, str]:
        shown = window_of(output)
        if shown is None:
            raise Refused(f"{where}: the window's lines are not in its output")
        self.windows[shown.path] = shown
        first, last = min(shown.lines), max(shown.lines)
        body = numbered("\n".join(shown.lines[n] for n in range(first, last + 1)), first)
        args = {"command": "view", "path": shown.path, "view_range": [first, last]}
        return Action(
            EDITOR, args
        ), f"Here is the result of running `cat -n` on {shown.path}:\n{body}"

    def _edit(self, command: str, output: str, where: str) -> tuple[Action, str]:
        match = EDIT.match(command.strip("\n"))
        if match is None:
            raise Refused(f"{where}: an edit that is not `edit A:B ... end_of_edit`")
        if any(sign in output for sign in REJECTED):
            raise Refused(f"{where}: SWE-agent's linter rejected this edit; sweflow would apply it")
        first, last, new = int(match.group(1)), int(match.group(2)), match.group(3)
        after = window_of(output)
        before = self.windows.get(after.path) if after else None
        if (
            after is None
            or before is None
            or not all(n in before.lines for n in range(first, last + 1))
        ):
            raise Refused(f"{where}: edit {first}:{last} of lines no window had shown")
        old = "\n".join(before.lines[n] for n in range(first, last + 1))
        if old == new:
            raise Refused(f"{where}: edit {first}:{last} changes nothing")
        self.windows[after.path] = after
        count = new.count("\n") + 1
        start, end = (
            max(1, first - SNIPPET_LINES),
            min(after.total, first + count - 1 + SNIPPET_LINES),
        )
        if not all(n in after.lines for n in range(start, end + 1)):
            raise Refused(
                f"{where}: the window after edit {first}:{last} does not show the edit whole"
            )
        snippet = numbered("\n".join(after.lines[n] for n in range(start, end + 1)), start)
        args = {"command": "str_replace", "path": after.path, "old_str": old, "new_str": new}
        note = (
            f"The file {after.path} has been edited. Here is the result of running `cat -n` on a "
            f"snippet of it:\n{snippet}\nReview the change; edit again if it is not right."
        )
        return Action(EDITOR, args), note

    def _find(self, command: str, output: str, where: str) -> tuple[Action, str]:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise Refused(f"{where}: cannot split find_file: {exc}") from None
        if len(words) not in (2, 3):
            raise Refused(f"{where}: find_file takes a name and a folder")
        folder = posixpath.join(self.cwd, words[2]) if len(words) == 3 else self.cwd
        found = [line for line in output.split("\n")[1:] if line.startswith("/")]
        bash = f"find {shlex.quote(folder)} -type f -name {shlex.quote(words[1])}"
        return Action(BASH, {"command": bash}), "\n".join(found)
