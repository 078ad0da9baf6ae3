"""The agent's tools by registry: a tool is one :class:`Tool` entry in :data:`TOOLS`.

Each entry carries its OpenAI function schema (what the model sees in tools mode), how it runs
in the sandbox (its observation is what the model reads next), and its one-line text form (what
a text-mode reply writes in its code block, and how SWE-agent's text styles show the call). A
tool whose ``run`` is None ends the run: its changes to the repository are the submission.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
    hide_durations: bool = False  # see without_durations()


ToolRun = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    """One action the model can call.

    ``run`` gives the observation (None: calling the tool ends the run). The text form is how
    the call reads as one shell-like line, SWE-agent style: ``raw`` names the one argument that
    is the whole line (bash's command); otherwise ``name``, the ``positional`` arguments, then
    ``--key value`` pairs, shell-quoted. Text-mode replies use the same form, so a model served
    without tool calling still has every tool.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolRun | None
    positional: tuple[str, ...] = ()
    raw: str | None = None
    brief: str = ""  # what it does, after its name, in the tools-mode instructions
    text_examples: tuple[str, ...] = ()  # text-form calls the text-mode instructions show

    @property
    def ends_run(self) -> bool:
        return self.run is None

    def openai_spec(self) -> dict[str, Any]:
        """The tool as an entry of the chat API's ``tools`` list."""
        function = {"name": self.name, "description": self.description}
        return {"type": "function", "function": {**function, "parameters": self.parameters}}

    def command_line(self, args: dict[str, Any]) -> str:
        """The call as one shell-like line (the inverse of :meth:`parse_command_line`)."""
        if self.raw is not None:
            return str(args.get(self.raw, ""))
        words = [self.name]
        words += [shlex.quote(_text(args[key])) for key in self.positional if key in args]
        for key, value in args.items():
            if key not in self.positional:
                words += [f"--{key}", shlex.quote(_text(value))]
        return " ".join(words)

    def parse_command_line(self, line: str) -> dict[str, Any]:
        """The arguments of a text-form call; ValueError says what is wrong with it."""
        if self.raw is not None:
            return {self.raw: line}
        words = shlex.split(line)  # ValueError on unbalanced quotes
        properties = self.parameters.get("properties", {})
        args: dict[str, Any] = {}
        rest = words[1:]
        for key in self.positional:
            if not rest or rest[0].startswith("--"):
                break
            args[key] = rest.pop(0)
        while rest:
            flag = rest.pop(0)
            key = flag[2:]
            if not flag.startswith("--") or key not in properties:
                known = ", ".join(f"--{k}" for k in properties if k not in self.positional)
                takes = f"its options are {known}" if known else "it takes no arguments"
                raise ValueError(f"{self.name}: unexpected {flag!r}; {takes}")
            if not rest:
                raise ValueError(f"{self.name}: {flag} needs a value")
            args[key] = _typed(rest.pop(0), properties[key].get("type"), flag)
        return args


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list) else str(value)


def _typed(text: str, kind: str | None, flag: str) -> Any:
    """A text-form value as its schema type (integer, array as JSON, else the string)."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "array":
            return json.loads(text)
    except ValueError:
        expected = "an integer" if kind == "integer" else "a JSON list"
        raise ValueError(f"{flag} expects {expected}") from None
    return text


def truncate(text: str, limit: int) -> str:
    """Head and tail of a long output with a note in between, so errors at the end survive."""
    if len(text) <= limit:
        return text
    half = (limit - 100) // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n\n[... {cut} characters cut; narrow the command ...]\n\n{text[-half:]}"


_COUNT = r"\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)"
_PYTEST_SUMMARY = re.compile(
    rf"^(?P<rule>=+ )?(?P<counts>{_COUNT}(?:, {_COUNT})*|no tests ran)"
    r" in [\d.]+(?:s| seconds)(?: \(\d+:\d\d:\d\d\))?(?(rule) =+)$",
    re.MULTILINE,
)
_UNITTEST_SUMMARY = re.compile(r"^Ran (\d+ tests?) in [\d.]+s$", re.MULTILINE)


def without_durations(output: str) -> str:
    """``output`` with its test runners' durations cut: pytest's ``3 passed in 0.61s`` reads
    ``3 passed`` (its ``===`` rule, whose width followed the duration's, a fixed one) and
    unittest's ``Ran 3 tests in 0.001s`` ``Ran 3 tests``. They are the only text that differs
    between two runs of one replay, so without them golden trajectories repeat byte for byte."""

    def pytest_line(match: re.Match[str]) -> str:
        counts = match["counts"]
        return f"=== {counts} ===" if match["rule"] else counts

    return _UNITTEST_SUMMARY.sub(r"Ran \1", _PYTEST_SUMMARY.sub(pytest_line, output))


async def _run_bash(args: dict[str, Any], ctx: ToolContext) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "bash needs a non-empty `command`."
    result = await ctx.sandbox.aexec(command, timeout=ctx.timeout_s)
    output = without_durations(result.output) if ctx.hide_durations else result.output
    note = ""
    if result.timed_out:
        note = f"\n[the command ran past {ctx.timeout_s:.0f} s and was killed]"
    elif result.exit_code:
        note = f"\n[exit code {result.exit_code}]"
    return truncate(output, ctx.max_chars) + note


async def _run_editor(args: dict[str, Any], ctx: ToolContext) -> str:
    try:
        return truncate(await run_editor(ctx.sandbox, args, ctx.workdir), ctx.max_chars)
    except ToolError as exc:
        return str(exc)


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
        raw="command",
        brief="runs a command",
    ),
    Tool(
        EDITOR,
        "View a file with line numbers (or list a directory), create a file, replace one exact "
        "occurrence of old_str with new_str, replace the lines line_range names with new_str, "
        "or insert new_str after line insert_line (0: at the top).",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(EDITOR_COMMANDS)},
                "path": {"type": "string", "description": "Absolute path."},
                "file_text": {"type": "string", "description": "create: the content."},
                "old_str": {"type": "string", "description": "str_replace: exact text."},
                "new_str": {
                    "type": "string",
                    "description": "str_replace/replace_lines/insert: new text.",
                },
                "line_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "replace_lines: [first, last] lines, as view numbers them.",
                },
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
        positional=("command", "path"),
        brief="views and edits files (view shows line numbers)",
        text_examples=(
            "str_replace_editor view /path/file.py --view_range '[10, 40]'",
            "str_replace_editor str_replace /path/file.py --old_str 'exact old text' "
            "--new_str 'new text'",
            "str_replace_editor replace_lines /path/file.py --line_range '[12, 14]' "
            "--new_str 'the new text of lines 12 to 14'",
            "str_replace_editor create /path/new.py --file_text 'the content'",
            "str_replace_editor insert /path/file.py --insert_line 12 --new_str 'text to insert'",
        ),
    ),
    Tool(
        SUBMIT,
        "Finish: your changes to the repository are the submission.",
        {"type": "object", "properties": {}},
        None,
        brief="ends the task with your changes",
    ),
)
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}
TOOL_SPECS: list[dict[str, Any]] = [tool.openai_spec() for tool in TOOLS]
