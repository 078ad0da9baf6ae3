"""Whether an issue's text gives its gold file away, in any of the ways a reader would take it.

A statement that never writes ``itertoolz.py`` can still point at it: a reproduction importing
``from toolz.itertoolz import get`` names the module, and a failing ``test_itertoolz.py`` names
the module it tests. A learning figure on such tasks measures reading as much as localising, so
the learning benchmark reports the share of tasks whose statement leaks (per split) beside the
rates; the leaks are kept, not rewritten away, because a real issue's reproduction imports what
it calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

LEAKS = ("file", "module", "test_file")


def gold_file_leaks(text: str, gold_paths: Iterable[str]) -> list[str]:
    """The ways ``text`` names one of ``gold_paths`` (repository-relative ``.py`` files):
    ``file`` (its name, ``itertoolz.py``), ``module`` (its dotted path, ``toolz.itertoolz``, or
    a ``from toolz import itertoolz``) and ``test_file`` (``test_itertoolz.py``)."""
    found = []
    for path in gold_paths:
        pure = PurePosixPath(path)
        if pure.suffix != ".py":
            continue
        stem = pure.stem
        checks = {
            "file": rf"(?<![\w.-]){re.escape(pure.name)}(?![\w-])",
            "module": _module_pattern(pure),
            "test_file": rf"(?<![\w.-])test_{re.escape(stem)}\.py\b",
        }
        found += [kind for kind, pattern in checks.items() if pattern and re.search(pattern, text)]
    return [kind for kind in LEAKS if kind in found]


def changed_files(patch: str) -> list[str]:
    """The files a patch changes (none for a patch that does not parse)."""
    try:
        return [file.path for file in PatchSet(patch)]
    except UnidiffParseError:
        return []


def _module_pattern(path: PurePosixPath) -> str | None:
    """A dotted import of the module (``pkg.mod``, ``from pkg import mod``), from its package
    down; a top-level module alone (``mod``) is too common a word to count."""
    parts = [p for p in path.with_suffix("").parts if p not in ("src", "lib")]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if len(parts) < 2:
        return None
    dotted = r"\.".join(re.escape(p) for p in parts)
    package, module = r"\.".join(re.escape(p) for p in parts[:-1]), re.escape(parts[-1])
    return (
        rf"(?<![\w.]){dotted}(?![\w])"
        rf"|\bfrom\s+{package}\s+import\s+(?:\(?[\w\s,]*,\s*)?{module}\b"
    )
