"""The agent's tools by registry: a tool is one :class:`Tool` entry in :data:`TOOLS`.

Each entry carries its OpenAI function schema (what the model sees in tools mode), how it runs
in the sandbox (its observation is what the model reads next), and its one-line text form (how
SWE-agent's text styles and logs show the call). A tool whose ``run`` is None ends the run: its
changes to the repository are the submission.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sweflow.agent.editor import COMMANDS as EDITOR_COMMANDS
from sweflow.agent.editor import ToolError, run_editor
from sweflow.sandbox import Sandbox

BASH, EDITOR, SUBMIT = "bash", "str_replace_editor", "submit"


@dataclass(frozen=True)
class ToolContext:
    """What a tool's run sees besides its arguments."""

    sandbox: Sandbox
    workdir: str
    timeout_s: float  # of one command
    max_chars: int  # of one observation (see truncate())


Run = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


def generic_text_form(name: str, args: dict[str, Any]) -> str:
    """``name --key value ...`` (lists as JSON), for tools without a form of their own."""
    words = [name]
    for key, value in args.items():
        text = json.dumps(value) if isinstance(value, list) else str(value)
        words += [f"--{key}", shlex.quote(text)]
    return " ".join(words)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Run | None  # None: calling the tool ends the run
    text_form: Callable[[dict[str, Any]], str] | None = field(default=None, compare=False)

    @property
    def ends_run(self) -> bool:
        return self.run is None

    def openai_spec(self) -> dict[str, Any]:
        """The tool as an entry of the chat API's ``tools`` list."""
        function = {"name": self.name, "description": self.description}
        return {"type": "function", "function": {**function, "parameters": self.parameters}}

    def command_line(self, args: dict[str, Any]) -> str:
        """The call as one shell-like line (SWE-agent's form)."""
        return self.text_form(args) if self.text_form else generic_text_form(self.name, args)


def truncate(text: str, limit: int) -> str:
    """Head and tail of a long output with a note in between, so errors at the end survive."""
    if len(text) <= limit:
        return text
    half = (limit - 100) // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n\n[... {cut} characters cut; narrow the command ...]\n\n{text[-half:]}"


async def _run_bash(args: dict[str, Any], ctx: ToolContext) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "bash needs a non-empty `command`."
    result = await ctx.sandbox.aexec(command, timeout=ctx.timeout_s)
    note = ""
    if result.timed_out:
        note = f"\n[the command ran past {ctx.timeout_s:.0f} s and was killed]"
    elif result.exit_code:
        note = f"\n[exit code {result.exit_code}]"
    return truncate(result.output, ctx.max_chars) + note


async def _run_editor(args: dict[str, Any], ctx: ToolContext) -> str:
    try:
        return truncate(await run_editor(ctx.sandbox, args, ctx.workdir), ctx.max_chars)
    except ToolError as exc:
        return str(exc)


def _editor_text_form(args: dict[str, Any]) -> str:
    rest = dict(args)
    head = f"{EDITOR} {rest.pop('command', '')} {rest.pop('path', '')}"
    return generic_text_form(head, rest)


TOOLS: tuple[Tool, ...] = (
    Tool(
        BASH,
        "Run a bash command in the repository's shell (state persists).",
        {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
        _run_bash,
        text_form=lambda args: str(args.get("command", "")),
    ),
    Tool(
        EDITOR,
        "View a file with line numbers (or list a directory), create a file, replace one exact "
        "occurrence of old_str with new_str, or insert new_str after line insert_line (0: at "
        "the top).",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(EDITOR_COMMANDS)},
                "path": {"type": "string", "description": "Absolute path."},
                "file_text": {"type": "string", "description": "create: the content."},
                "old_str": {"type": "string", "description": "str_replace: exact text."},
                "new_str": {"type": "string", "description": "str_replace/insert: new text."},
                "insert_line": {"type": "integer", "description": "insert: after this line."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "view: [start, end] lines; end -1 means to the end.",
                },
            },
            "required": ["command", "path"],
        },
        _run_editor,
        text_form=_editor_text_form,
    ),
    Tool(
        SUBMIT,
        "Finish: your changes to the repository are the submission.",
        {"type": "object", "properties": {}},
        None,
        text_form=lambda args: SUBMIT,
    ),
)
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}
TOOL_SPECS: list[dict[str, Any]] = [tool.openai_spec() for tool in TOOLS]
