"""What the model asked for: parsed from native tool calls or from one fenced bash block.

A reply that cannot be parsed raises FormatError, whose message goes back to the model as the
observation (the run goes on until ``max_format_errors`` such replies in a row).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sweflow.agent.tools import BASH, TOOLS_BY_NAME
from sweflow.errors import SweflowError

# ```bash / ```sh / ```shell / bare ```, up to the next ``` at the start of a line
FENCE = re.compile(r"^```(?:bash|sh|shell)?[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


class FormatError(SweflowError):
    """The reply holds no usable action; the message tells the model what to send instead."""


@dataclass(frozen=True)
class Action:
    """One tool invocation; ``call_id`` links it to its tool message in tools mode."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None

    def command_line(self) -> str:
        """The action as one shell-like line (SWE-agent's form): what a text-mode reply holds."""
        return TOOLS_BY_NAME[self.tool].command_line(self.args)


class Invocation(Protocol):
    """An action as parsed (:class:`Action`) or as recorded in a trajectory (``ActionRecord``)."""

    tool: str
    args: dict[str, Any]


def same_actions(reply: Sequence[Invocation], before: Sequence[Invocation]) -> bool:
    """Whether two replies carry the same actions (tools and arguments alike); a reply with
    none (it did not parse) repeats nothing."""
    return bool(before) and [(a.tool, a.args) for a in reply] == [(b.tool, b.args) for b in before]


def from_tool_calls(tool_calls: list[dict[str, Any]]) -> list[Action]:
    """Actions of an assistant message's ``tool_calls`` (OpenAI format), in order."""
    actions = []
    for call in tool_calls:
        fn = call.get("function") or {}
        name = fn.get("name", "")
        if name not in TOOLS_BY_NAME:
            raise FormatError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS_BY_NAME)}")
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except json.JSONDecodeError as exc:
            raise FormatError(f"the arguments of {name} are not valid JSON: {exc}") from None
        if not isinstance(args, dict):
            raise FormatError(f"the arguments of {name} must be a JSON object")
        actions.append(Action(name, args, call.get("id")))
    return actions


def from_text(content: str) -> Action:
    """The one fenced block of a text reply: a tool's command line when it starts with a tool's
    name (``submit``, ``str_replace_editor view ...``), else a bash command."""
    blocks = FENCE.findall(content or "")
    if len(blocks) != 1:
        found = "no" if not blocks else str(len(blocks))
        raise FormatError(
            f"found {found} bash code blocks; reply with a short thought and exactly one "
            "```bash``` block (its only command `submit` to finish)"
        )
    line = blocks[0].strip()
    tool = TOOLS_BY_NAME.get(line.split(maxsplit=1)[0] if line else BASH)
    if tool is None or tool.raw is not None:
        return Action(BASH, {"command": line})
    try:
        return Action(tool.name, tool.parse_command_line(line))
    except ValueError as exc:
        raise FormatError(f"cannot read that {tool.name} command: {exc}") from None


def thought_of(content: str | None) -> str:
    """The reply's text outside its code block: the model's reasoning for the step."""
    return FENCE.sub("", content or "").strip()
