"""A run as the steps a person reads: each model call's thought, its actions (an edit shown as
the diff it makes) and what came back."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from sweflow.agent.tools import EDITOR, TOOLS_BY_NAME
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory

EDITS = ("create", "str_replace", "replace_lines", "insert")
NAMING = ("command", "path", "insert_line", "line_range")  # an edit's arguments besides its texts
HUNK = re.compile(r"^@@ .* @@$")


def issue_of(traj: Trajectory) -> str:
    """The task as the agent was given it: its first user message."""
    for message in traj.messages:
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def steps_of(traj: Trajectory) -> list[dict[str, Any]]:
    """The run's steps as the page's JSON."""
    return [_step(step) for step in traj.steps]


def _step(step: StepRecord) -> dict[str, Any]:
    return {
        "index": step.index,
        "thought": step.thought,
        "format_error": step.format_error or "",
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "model_s": round(step.model_s, 3),
        "exec_s": round(step.exec_s, 3),
        "actions": [_action(action) for action in step.actions],
    }


def _action(action: ActionRecord) -> dict[str, Any]:
    diff = edit_diff(action.tool, action.args)
    return {
        "tool": action.tool,
        "line": _line(action, short=diff is not None),
        "observation": action.observation,
        "diff": diff,
        "exec_s": round(action.exec_s, 3),
    }


def _line(action: ActionRecord, short: bool) -> str:
    """The action as one command line; an edit's without its texts (its diff shows them)."""
    tool = TOOLS_BY_NAME.get(action.tool)
    if tool is None:
        return f"{action.tool} {json.dumps(action.args)}"
    if short:
        kept = {k: v for k, v in action.args.items() if k in NAMING}
        return tool.command_line(kept)
    return tool.command_line(action.args)


def edit_diff(tool: str, args: dict[str, Any]) -> str | None:
    """The unified diff an editor action makes (None for anything else). A str_replace's hunk
    has no line numbers: the action names the text it replaces, not where it is; a
    replace_lines hunk has no old lines: it names them by number only."""
    command, path = args.get("command"), args.get("path")
    if tool != EDITOR or command not in EDITS or not isinstance(path, str):
        return None
    new = args.get("new_str") if command != "create" else args.get("file_text")
    if not isinstance(new, str):
        return None
    path = path if path.startswith("/") else f"/{path}"  # a/<path>, as git names it
    if command == "create":
        return _unified("", new, "/dev/null", f"b{path}")
    if command == "insert":
        after = args.get("insert_line")
        if not isinstance(after, int):
            return None
        added = _lines(new)
        body = "".join(f"+{line}" for line in added)
        return f"--- a{path}\n+++ b{path}\n@@ -{after},0 +{after + 1},{len(added)} @@\n{body}"
    if command == "replace_lines":
        span = args.get("line_range")
        if not (isinstance(span, list) and len(span) == 2):
            return None
        body = "".join(f"+{line}" for line in _lines(new))
        return f"--- a{path}\n+++ b{path}\n@@ lines {span[0]}-{span[1]} replaced by @@\n{body}"
    old = args.get("old_str")
    if not isinstance(old, str):
        return None
    diff = _unified(old, new, f"a{path}", f"b{path}")
    return "\n".join("@@ str_replace @@" if HUNK.match(ln) else ln for ln in diff.split("\n"))


def _unified(old: str, new: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(_lines(old), _lines(new), before, after, n=3)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(True)]
