"""The repository's Python source as the replay teacher knows it before its first step: every
function and class with its lines, and the lines themselves. The teacher plans with this map,
but moves only along what the issue and its own observations name (sweflow.agent.teacher.clues).
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass

from sweflow.grading.patches import is_test_path
from sweflow.sandbox import Sandbox

MAX_FILES = 2000  # a repository larger than this is mapped in part (its first files by path)


@dataclass(frozen=True)
class Definition:
    """A function or class: its name, file and lines (``start``: the ``def``/``class`` line)."""

    name: str
    path: str
    start: int
    end: int


class SourceMap:
    """Definitions by name and by file, and each file's lines (1-based through :meth:`line`)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.lines = {path: text.split("\n") for path, text in sources.items()}
        self.by_name: dict[str, list[Definition]] = {}
        self.by_path: dict[str, list[Definition]] = {}
        for path, text in sorted(sources.items()):
            for found in _definitions(path, text):
                self.by_name.setdefault(found.name, []).append(found)
                self.by_path.setdefault(path, []).append(found)

    def line(self, path: str, number: int) -> str:
        return self.lines[path][number - 1]

    def length(self, path: str) -> int:
        return len(self.lines[path])

    def enclosing(self, path: str, line: int) -> Definition | None:
        """The innermost definition whose lines hold ``line``."""
        holding = [d for d in self.by_path.get(path, []) if d.start <= line <= d.end]
        return min(holding, key=lambda d: d.end - d.start, default=None)

    def containing(self, fragment: str) -> list[tuple[str, int]]:
        """(path, line) of every line holding ``fragment``."""
        return [
            (path, i)
            for path, lines in sorted(self.lines.items())
            for i, text in enumerate(lines, 1)
            if fragment in text
        ]


def _definitions(path: str, text: str) -> list[Definition]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # not Python 3 (or not Python): its lines only
        return []
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [
        Definition(node.name, path, node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
    ]


async def read_sources(sandbox: Sandbox, workdir: str) -> dict[str, str]:
    """The repository's tracked Python files outside its tests, read from the sandbox."""
    listing = await sandbox.aexec(f"git -C {shlex.quote(workdir)} ls-files -z -- '*.py'")
    paths = sorted(p for p in listing.output.split("\0") if p and not is_test_path(p))
    sources = {}
    for path in paths[:MAX_FILES]:
        data = await sandbox.aread(f"{workdir.rstrip('/')}/{path}")
        sources[path] = data.decode("utf-8", errors="replace")
    return sources
