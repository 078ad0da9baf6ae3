"""The agent's tools: their OpenAI schemas and how each runs in the sandbox."""

from __future__ import annotations

from typing import Any

from sweflow.agent.actions import BASH, EDITOR, SUBMIT, Action
from sweflow.agent.editor import ToolError, run_editor
from sweflow.sandbox import Sandbox

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": BASH,
            "description": "Run a bash command in the repository's shell (state persists).",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": EDITOR,
            "description": (
                "View a file with line numbers (or list a directory), create a file, replace "
                "one exact occurrence of old_str with new_str, or insert new_str after line "
                "insert_line (0: at the top)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "enum": ["view", "create", "str_replace", "insert"],
                    },
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
        },
    },
    {
        "type": "function",
        "function": {
            "name": SUBMIT,
            "description": "Finish: your changes to the repository are the submission.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


def truncate(text: str, limit: int) -> str:
    """Head and tail of a long output with a note in between, so errors at the end survive."""
    if len(text) <= limit:
        return text
    half = (limit - 100) // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n\n[... {cut} characters cut; narrow the command ...]\n\n{text[-half:]}"


async def run_action(
    sandbox: Sandbox, action: Action, *, workdir: str, timeout_s: float, max_chars: int
) -> str:
    """The observation of one (non-submit) action; tool errors become observations too."""
    if action.tool == BASH:
        command = action.args.get("command")
        if not isinstance(command, str) or not command.strip():
            return "bash needs a non-empty `command`."
        result = await sandbox.aexec(command, timeout=timeout_s)
        note = ""
        if result.timed_out:
            note = f"\n[the command ran past {timeout_s:.0f} s and was killed]"
        elif result.exit_code:
            note = f"\n[exit code {result.exit_code}]"
        return truncate(result.output, max_chars) + note
    try:
        return truncate(await run_editor(sandbox, action.args, workdir), max_chars)
    except ToolError as exc:
        return str(exc)
