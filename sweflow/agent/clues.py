"""What a text names: the clues an agent can follow from the issue and from what it has seen.

The imitability check (sweflow.agent.imitable) holds every step of a trajectory to them: a file
is named when a path to it appears, a search term when it appears, in the issue or an earlier
observation.
"""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


def identifiers(text: str) -> list[str]:
    """Identifiers of three characters or more in ``text``, in order, once each."""
    return list(dict.fromkeys(IDENTIFIER.findall(text)))


def names_path(text: str, path: str, workdir: str) -> bool:
    """Whether ``text`` names repository file ``path`` (relative): as itself, ``./path`` or
    under ``workdir``, never as the tail of another path (``tests/test_parse.py`` does not
    name ``parse.py``)."""
    prefix = rf"(?:\./|{re.escape(workdir.rstrip('/'))}/)?"
    return re.search(rf"(?<![\w./-]){prefix}{re.escape(path)}(?![\w-])", text) is not None
