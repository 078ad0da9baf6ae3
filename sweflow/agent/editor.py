"""The file viewer/editor tool (SWE-agent's ``str_replace_editor``) over a sandbox.

Files are read and written through the sandbox's file API (no shell round trip, no quoting), so
an edit costs well under a millisecond. Every reply shows numbered lines, so the model sees the
exact text it can quote in the next ``str_replace``, or the line numbers a ``replace_lines``
names (SWE-agent's first ``edit N:M``: the new text only, the old text named by its lines, which
a small model can write where quoting the old text verbatim is what it gets wrong).
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from sweflow.errors import SweflowError
from sweflow.sandbox import Sandbox, SandboxFileError

SNIPPET_LINES = 4  # context shown around an edit
COMMANDS = ("view", "create", "str_replace", "replace_lines", "insert")


class ToolError(SweflowError):
    """The action could not be done; the message is the observation the model gets."""


class UnreadableFile(ToolError):
    """The file to view or edit could not be read (most often: there is no such file)."""


def numbered(text: str, first: int = 1) -> str:
    """``cat -n`` style: right-aligned line numbers, a tab, the line."""
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), first))


async def run_editor(sandbox: Sandbox, args: dict[str, Any], workdir: str) -> str:
    """Do one editor command; raises ToolError with a message for the model."""
    command = args.get("command")
    if command not in COMMANDS:
        raise ToolError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    raw_path = args.get("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise ToolError(f"{command} needs a `path`")
    path = posixpath.normpath(posixpath.join(workdir, raw_path))
    try:
        if command == "view":
            return await _view(sandbox, path, args.get("view_range"))
        if command == "create":
            return await _create(sandbox, path, _text(args, "file_text"))
        if command == "str_replace":
            return await _str_replace(sandbox, path, _text(args, "old_str"), args.get("new_str"))
        if command == "replace_lines":
            return await _replace_lines(sandbox, path, args.get("line_range"), args.get("new_str"))
        return await _insert(sandbox, path, args.get("insert_line"), _text(args, "new_str"))
    except UnreadableFile as exc:
        raise ToolError(f"{exc}{await _namesakes(sandbox, path, workdir)}") from None


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ToolError(f"this command needs `{key}` (a string)")
    return value


async def _read(sandbox: Sandbox, path: str) -> str:
    try:
        return (await sandbox.aread(path)).decode("utf-8", errors="replace")
    except SandboxFileError as exc:
        raise UnreadableFile(str(exc).replace(" in the sandbox", "")) from None


async def _namesakes(sandbox: Sandbox, path: str, workdir: str) -> str:
    """For a ``path`` that does not exist: the repository's files it may have meant (a module
    named without its package, a package named as a module), as a shell user would find them
    with ``find``. The fine-tuned student spent whole runs viewing such paths."""
    package = posixpath.join(posixpath.splitext(path)[0], "__init__.py")
    found = await sandbox.aexec(
        f"test -e {shlex.quote(path)} && exit 0; "
        f"test -f {shlex.quote(package)} && echo {shlex.quote(package)}; "
        f"find {shlex.quote(workdir)} -name {shlex.quote(posixpath.basename(path))} -type f "
        "-not -path '*/.*' 2>/dev/null | sort | head -n 5"
    )
    names = [line for line in found.output.splitlines() if line.strip()]
    return f"\nDid you mean: {', '.join(names)}?" if names else ""


async def _write(sandbox: Sandbox, path: str, text: str) -> None:
    try:
        await sandbox.awrite(path, text)
    except SandboxFileError as exc:
        raise ToolError(str(exc).replace(" in the sandbox", "")) from None


async def _is_dir(sandbox: Sandbox, path: str) -> bool:
    return (await sandbox.aexec(f"test -d {shlex.quote(path)}")).exit_code == 0


async def _view(sandbox: Sandbox, path: str, view_range: Any) -> str:
    if await _is_dir(sandbox, path):
        listing = await sandbox.aexec(
            f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort | head -n 400"
        )
        return f"Files and directories up to 2 levels deep in {path}:\n{listing.output}"
    lines = (await _read(sandbox, path)).split("\n")
    if len(lines) > 1 and lines[-1] == "":  # the final newline ends the last line (as cat -n)
        lines.pop()
    first, last = view_span(view_range, len(lines))
    shown = min(last, len(lines))
    body = numbered("\n".join(lines[first - 1 : shown]), first)
    ends = f"\n(the file ends at line {len(lines)})" if shown < last else ""
    return f"Here is the result of running `cat -n` on {path}:\n{body}{ends}"


def view_span(view_range: Any, length: int) -> tuple[int, int]:
    """The lines ``[first, last]`` a view of a ``length``-line file asks for: the whole file
    without a range, to its end for an end of -1. An end past the file is kept (the view shows
    up to the last line: the fine-tuned student asks for a fixed span after a grep hit, and
    learned nothing from the error it once got); a range outside the file is a ToolError."""
    if view_range is None:
        return 1, length
    if not (
        isinstance(view_range, list)
        and len(view_range) == 2
        and all(isinstance(n, int) for n in view_range)
    ):
        raise ToolError("view_range must be two line numbers [start, end] (end -1: to the end)")
    first, last = view_range[0], (length if view_range[1] == -1 else view_range[1])
    if not 1 <= first <= min(last, length):
        raise ToolError(f"view_range {view_range} is outside the file's 1..{length} lines")
    return first, last


async def _create(sandbox: Sandbox, path: str, text: str) -> str:
    exists = await sandbox.aexec(f"test -e {shlex.quote(path)}")
    if exists.exit_code == 0:
        raise ToolError(f"{path} already exists; edit it with str_replace or insert")
    await _write(sandbox, path, text)
    return f"File created successfully at: {path}"


async def _str_replace(sandbox: Sandbox, path: str, old: str, new: Any) -> str:
    new = "" if new is None else new
    if not isinstance(new, str):
        raise ToolError("`new_str` must be a string")
    if new == old:  # a small model's usual non-edit: "edited", yet the file did not change
        raise ToolError("No replacement was performed: new_str is the same as old_str.")
    text = await _read(sandbox, path)
    count = text.count(old) if old else 0
    if count != 1:
        if count == 0:
            raise ToolError(f"No replacement was performed: old_str is not verbatim in {path}.")
        starts = [i + 1 for i, line in enumerate(text.split("\n")) if old.split("\n")[0] in line]
        raise ToolError(
            f"No replacement was performed: old_str appears {count} times in {path} "
            f"(lines {starts}); include more context to make it unique."
        )
    at = text.index(old)
    edited = text[:at] + new + text[at + len(old) :]
    await _write(sandbox, path, edited)
    return _edited(path, edited, text[:at].count("\n") + 1, new.count("\n") + 1)


async def _replace_lines(sandbox: Sandbox, path: str, line_range: Any, new: Any) -> str:
    """Lines ``[first, last]`` of the file become ``new`` (its lines; empty: they are deleted)."""
    new = "" if new is None else new
    if not isinstance(new, str):
        raise ToolError("`new_str` must be a string")
    text = await _read(sandbox, path)
    lines = text.split("\n")
    length = len(lines) - 1 if len(lines) > 1 and lines[-1] == "" else len(lines)
    if not (
        isinstance(line_range, list)
        and len(line_range) == 2
        and all(isinstance(n, int) for n in line_range)
        and 1 <= line_range[0] <= line_range[1] <= length
    ):
        raise ToolError(
            f"line_range must be two line numbers [first, last] within the file's 1..{length} "
            "lines (view it to see them)"
        )
    first, last = line_range
    added = new.removesuffix("\n").split("\n") if new else []
    if added == lines[first - 1 : last]:
        raise ToolError("No replacement was performed: new_str is the same as those lines.")
    edited = "\n".join(lines[: first - 1] + added + lines[last:])
    await _write(sandbox, path, edited)
    return _edited(path, edited, first, max(len(added), 1))


async def _insert(sandbox: Sandbox, path: str, insert_line: Any, new: str) -> str:
    lines = (await _read(sandbox, path)).split("\n")
    if not isinstance(insert_line, int) or not 0 <= insert_line <= len(lines):
        raise ToolError(f"insert_line must be a line number in 0..{len(lines)}")
    added = new.split("\n")
    text = "\n".join(lines[:insert_line] + added + lines[insert_line:])
    await _write(sandbox, path, text)
    return _edited(path, text, insert_line + 1, len(added))


def _edited(path: str, text: str, first: int, count: int) -> str:
    lines = text.split("\n")
    start = max(1, first - SNIPPET_LINES)
    end = min(len(lines), first + count - 1 + SNIPPET_LINES)
    snippet = numbered("\n".join(lines[start - 1 : end]), start)
    return (
        f"The file {path} has been edited. Here is the result of running `cat -n` on a snippet "
        f"of it:\n{snippet}\nReview the change; edit again if it is not right."
    )
