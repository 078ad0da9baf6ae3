"""SWE-smith's trajectories (``SWE-bench/SWE-smith-trajectories``) in its three splits, read as
SWE-smith defines them (swesmith/train/traj_mgr/utils.py) and SWE-agent writes them:

- ``tool``: SWE-agent's own history (``get_messages``): assistant messages with OpenAI
  ``tool_calls`` (and ``thought``/``action``), tool messages with ``tool_call_ids`` and content as
  a list of ``{"type": "text"}`` parts;
- ``xml``: each action written after the thought as ``<function=NAME>`` with one
  ``<parameter=KEY>VALUE</parameter>`` per argument (``old_str``, ``new_str`` and ``file_text``
  on lines of their own), observations as user messages;
- ``ticks``: the thought, a blank line, and SWE-agent's action string in a bare fenced block:
  ``str_replace_editor view /testbed/x.py  --view_range 1 20`` (SWE-agent's
  tools/edit_anthropic invoke format: string arguments shell-quoted, the range space-joined),
  ``submit``, or a bash command as typed.

The tools are the ones sweflow's agent has (bash, str_replace_editor, submit), so actions carry
over as they are; the task is read from ``<pr_description>`` and the folder from
``<uploaded_files>``. ``messages`` may be a JSON string (the dataset's current revision) or a list.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from sweflow.agent.actions import Action
from sweflow.agent.tools import BASH, EDITOR, SUBMIT
from sweflow.training.sft.sources.episode import (
    Episode,
    Refused,
    checked_action,
    observation_text,
)
from sweflow.training.sft.sources.turns import Turn, steps_of, text_of

PR = re.compile(r"<pr_description>\s*\n(.*?)\n\s*</pr_description>", re.DOTALL)
ISSUE = re.compile(r"<issue_description>\s*\n(.*?)\n\s*</issue_description>", re.DOTALL)
UPLOADED = re.compile(r"<uploaded_files>\s*\n(.*?)\n\s*</uploaded_files>", re.DOTALL)
FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.DOTALL)
BLOCK_KEYS = ("old_str", "new_str", "file_text")  # SWE-smith's XML_STR_REPLACES
REPO_END = re.compile(
    r"-\d+\Z|\."
)  # owner__name-123 (SWE-bench), owner__name.commit... (SWE-smith)
TICKS = re.compile(r"\n?```\n(.*)\n```\s*\Z", re.DOTALL)


def messages_of(row: dict[str, Any], key: str = "messages") -> list[dict[str, Any]]:
    """The row's messages, decoded when the dataset stores them as a JSON string."""
    messages = row.get(key)
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError as exc:
            raise Refused(f"{key} is not JSON: {exc.msg}") from None
    if not isinstance(messages, list) or not messages:
        raise Refused(f"no {key}")
    return messages


def task_of(messages: list[dict[str, Any]]) -> tuple[str, str, int]:
    """(problem statement, repository folder, index of the task message)."""
    for index, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        text = text_of(message.get("content"))
        found = PR.search(text) or ISSUE.search(text)
        folder = UPLOADED.search(text)
        if not found or not folder:
            raise Refused("the task message has no <pr_description> and <uploaded_files>")
        return found.group(1).strip(), folder.group(1).strip(), index
    raise Refused("no task (user) message")


def style_of(messages: list[dict[str, Any]]) -> str:
    """``tool``, ``xml`` or ``ticks``: how the row's assistant turns write their actions."""
    replies = [m for m in messages if m.get("role") == "assistant"]
    if any(m.get("tool_calls") for m in replies):
        return "tool"
    if any("<function=" in text_of(m.get("content")) for m in replies):
        return "xml"
    return "ticks"


def episode(row: dict[str, Any], names: dict[str, str] | None = None) -> Episode:
    """The row as an Episode; ``names`` renames tools (OpenHands' execute_bash, finish)."""
    messages = messages_of(row)
    problem, workdir, start = task_of(messages)
    parse = {"tool": _tool_turn, "xml": _xml_turn, "ticks": _ticks_turn}[style_of(messages)]
    turns: list[Turn] = []
    for message in messages[start + 1 :]:
        role = message.get("role")
        if role == "assistant":
            turns.append(parse(message, f"turn {len(turns) + 1}", names or {}))
        elif role in ("tool", "user") and turns:
            turns[-1].observations.append(observation_text(text_of(message.get("content"))))
    instance = str(row.get("instance_id") or row.get("traj_id") or "")
    return Episode(instance, problem, workdir, steps_of(turns), repo=repo_of(instance))


def repo_of(instance_id: str) -> str:
    """``owner/name`` from an ``owner__name...`` id (SWE-bench's and SWE-smith's layout)."""
    owner, sep, rest = instance_id.partition("__")
    name = REPO_END.split(rest)[0]
    return f"{owner}/{name}" if sep else ""


def _tool_turn(message: dict[str, Any], where: str, names: dict[str, str]) -> Turn:
    actions, thoughts = [], [message.get("thought") or text_of(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        raw = function.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except (json.JSONDecodeError, TypeError, ValueError):
            raise Refused(
                f"{where}: the arguments of {function.get('name')} are not JSON"
            ) from None
        if (action := _action(function.get("name", ""), args, where, names)) is not None:
            actions.append(action)
        else:
            thoughts.append(str(args.get("thought", "")))
    return Turn("\n\n".join(t.strip() for t in thoughts if t and t.strip()), actions)


def _xml_turn(message: dict[str, Any], where: str, names: dict[str, str]) -> Turn:
    text = text_of(message.get("content"))
    actions = []
    for name, body in FUNCTION.findall(text):
        args: dict[str, Any] = {}
        for key, value in PARAMETER.findall(body):
            if key in BLOCK_KEYS:
                value = value.removeprefix("\n").removesuffix("\n")
            args[key] = _typed(key, value, where)
        actions.append(_action(name, args, where, names))
    thought = text.split("<function=", 1)[0].strip()
    return Turn(thought, [a for a in actions if a is not None])


def _typed(key: str, value: str, where: str) -> Any:
    """An XML parameter's value as its schema type (SWE-smith writes them with ``{v}``)."""
    if key == "insert_line":
        try:
            return int(value.strip())
        except ValueError:
            raise Refused(f"{where}: insert_line {value!r} is not a number") from None
    if key == "view_range":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise Refused(f"{where}: view_range {value!r} is not a list") from None
    return value


def _ticks_turn(message: dict[str, Any], where: str, names: dict[str, str]) -> Turn:
    text = text_of(message.get("content"))
    block = TICKS.search(text)
    if block is None:
        return Turn(text.strip(), [])
    return Turn(text[: block.start()].strip(), [swe_agent_action(block.group(1), where)])


def swe_agent_action(line: str, where: str) -> Action:
    """An action string of SWE-agent's function-calling tools (its ``invoke_format``)."""
    stripped = line.strip()
    if stripped == SUBMIT:
        return Action(SUBMIT, {})
    if not stripped.startswith(f"{EDITOR} "):
        return Action(BASH, {"command": line})
    try:
        words = shlex.split(stripped)
    except ValueError as exc:
        raise Refused(f"{where}: cannot split the editor call: {exc}") from None
    if len(words) < 3:
        raise Refused(f"{where}: {EDITOR} needs a command and a path")
    args: dict[str, Any] = {"command": words[1], "path": words[2]}
    rest = words[3:]
    while rest:
        flag = rest.pop(0)
        key = flag.removeprefix("--")
        if key == "view_range" and len(rest) >= 2:
            args[key] = [_number(rest.pop(0), where), _number(rest.pop(0), where)]
        elif key in ("file_text", "old_str", "new_str") and rest:
            args[key] = rest.pop(0)
        elif key == "insert_line" and rest:
            args[key] = _number(rest.pop(0), where)
        else:
            raise Refused(f"{where}: {EDITOR} has no argument {flag!r}")
    return checked_action(EDITOR, args, where)


def _number(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Refused(f"{where}: {text!r} is not a line number") from None


def _action(name: str, args: dict[str, Any], where: str, names: dict[str, str]) -> Action | None:
    """A sweflow action; None for a tool that only records a thought (OpenHands' think)."""
    name = names.get(name, name)
    if name == "":
        return None
    return checked_action(name, {} if name == SUBMIT else args, where)
