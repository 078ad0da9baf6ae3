"""What a text names: the clues an agent can follow from the issue and from what it has seen.

The replay teacher moves only along these clues (sweflow.agent.teacher.replay_route), and the
imitability check (sweflow.agent.teacher.imitable) holds every step of a trajectory to them: a file
is named when a path to it appears, a search term when it appears, in the issue or an earlier
observation.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass

FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
GREP_HIT = re.compile(r"^(?:\./)?(?P<path>[\w./-]+\.\w+):(?P<line>\d+):", re.MULTILINE)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
CALLED = re.compile(r"(?:^|[^\w.])@?(?:\w+\.)*([A-Za-z_]\w{2,})\s*\(")
# "ValueError: format spec '7f' not recognised", "re.error: bad character ..."
ERROR = re.compile(r"\b(?:\w+\.)*(?:[A-Z]\w*(?:Error|Exception)|error): (?P<message>.+)$", re.M)
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|\b\d+\b")
QUOTED_NAME = re.compile(r"'([A-Za-z_]\w*)'|\"([A-Za-z_]\w*)\"")
FENCED = re.compile(r"^```(?P<lang>[\w+-]*)[ \t]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`\n]+)`")
MIN_FRAGMENT = 10  # characters of an error message's literal part worth searching for


@dataclass(frozen=True)
class Frame:
    """One line of a traceback inside the repository (path relative to it)."""

    path: str
    line: int
    func: str


def frames(text: str, workdir: str) -> list[Frame]:
    """Traceback frames in files under ``workdir``, outermost first."""
    root = workdir.rstrip("/") + "/"
    return [
        Frame(m["path"][len(root) :], int(m["line"]), m["func"])
        for m in FRAME.finditer(text)
        if m["path"].startswith(root)
    ]


def grep_hits(text: str) -> list[tuple[str, int]]:
    """(path, line) of each ``path:line:`` hit that ``grep -rn`` printed."""
    return [(m["path"], int(m["line"])) for m in GREP_HIT.finditer(text)]


def called(text: str) -> list[str]:
    """Names called (``name(``, ``obj.name(``, ``@name(``) in code, in order, once each."""
    return list(dict.fromkeys(CALLED.findall(text)))


def identifiers(text: str) -> list[str]:
    """Identifiers of three characters or more in ``text``, in order, once each."""
    return list(dict.fromkeys(IDENTIFIER.findall(text)))


def subject(test: str) -> str | None:
    """What a test's name says it tests: ``test_merge_sorted`` -> ``merge_sorted``,
    ``LRUCacheTest`` -> ``LRUCache``; None for a name that is not a test's."""
    stripped = re.sub(r"^(?:test_|Test)|(?:_test|Tests?)$", "", test)
    return stripped if stripped != test and len(stripped) > 2 else None


def test_id_name(span: str) -> str:
    """A test id without its file (``tests/test_parse.py::TestX::test_y`` -> ``TestX::test_y``),
    whose name would read as a lead of its own; any other text as it is."""
    head, sep, rest = span.partition("::")
    return rest if sep and head.endswith(".py") else span


def error_messages(text: str) -> list[str]:
    """The messages of the errors ``text`` reports (``ValueError: <message>``)."""
    return [m["message"] for m in ERROR.finditer(text)]


def fragments(text: str) -> list[str]:
    """The literal parts of the error messages in ``text`` (quoted values and numbers taken
    out), long enough to search the source for, in order, once each."""
    parts = []
    for message in error_messages(text):
        for part in QUOTED.split(message):
            part = part.strip(" :,.;()[]")
            if len(part) >= MIN_FRAGMENT:
                parts.append(part)
    return list(dict.fromkeys(parts))


def quoted_names(message: str) -> list[str]:
    """Identifiers quoted in an error message (``'_Link' object has no attribute 'next'``)."""
    return [a or b for a, b in QUOTED_NAME.findall(message)]


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of a Markdown text."""
    return [m["code"] for m in FENCED.finditer(text)]


def inline_code(text: str) -> list[str]:
    """The `inline code` spans of a Markdown text."""
    return INLINE.findall(text)


def reproduction(text: str) -> str | None:
    """The first fenced Python (or untagged) block of an issue that is a whole program."""
    for m in FENCED.finditer(text):
        code = m["code"]
        if m["lang"] not in ("", "python", "py"):
            continue
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        if code.strip():
            return code
    return None


def grep_operands(words: list[str]) -> list[str]:
    """A grep command's operands, its pattern first and then its paths: the words after
    ``grep`` that are not options."""
    return [w for w in words[1:] if not w.startswith("-") and w != "grep"]


def names_path(text: str, path: str, workdir: str) -> bool:
    """Whether ``text`` names repository file ``path`` (relative): as itself, ``./path`` or
    under ``workdir``, never as the tail of another path (``tests/test_parse.py`` does not
    name ``parse.py``)."""
    prefix = rf"(?:\./|{re.escape(workdir.rstrip('/'))}/)?"
    return re.search(rf"(?<![\w./-]){prefix}{re.escape(path)}(?![\w-])", text) is not None


def repo_relative(path: str, workdir: str) -> str:
    """A path relative to the repository root; "" for the root itself."""
    root = workdir.rstrip("/")
    full = posixpath.normpath(posixpath.join(root, path))
    if full == root:
        return ""
    return full[len(root) + 1 :] if full.startswith(root + "/") else full
