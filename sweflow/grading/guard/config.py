"""The test runner's configuration in a repository's files: what of a file's text decides how
pytest runs, so that a patch may edit the rest of the file and never that.

Two kinds: pytest's settings (``pytest.ini``; the pytest section of ``tox.ini``, ``setup.cfg``,
``pyproject.toml``), and install metadata, which the eval script's re-install turns into
plugins pytest loads by itself (a ``pytest11`` entry point in ``setup.cfg``, ``pyproject.toml``
or ``setup.py``, or any ``entry_points.txt``). ``setup.py`` is code: its part here is only
the entry-point group's name as written; a plugin it declares any other way is caught in the
run, where the guard's own plugin sees where every hook comes from.
"""

from __future__ import annotations

import configparser
import tomllib
from pathlib import PurePosixPath

ENTRY_POINT_GROUP = "pytest11"
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
# The pytest settings of each configuration file that may hold them: (format, section path).
PYTEST_SETTINGS = {
    "pytest.ini": ("ini", ("pytest",)),
    ".pytest.ini": ("ini", ("pytest",)),
    "pytest.toml": ("toml", ("pytest",)),
    ".pytest.toml": ("toml", ("pytest",)),
    "tox.ini": ("ini", ("pytest",)),
    "setup.cfg": ("ini", ("tool:pytest",)),
    "pyproject.toml": ("toml", ("tool", "pytest")),
}
METADATA = frozenset({"setup.cfg", "pyproject.toml", "setup.py", "entry_points.txt"})


def is_startup_hook(path: str) -> bool:
    """A file the interpreter runs at start-up from wherever it lies on sys.path."""
    name = PurePosixPath(path).name
    return name in STARTUP_HOOKS or name.endswith(".pth")


def runner_config_change(path: str, before: str, after: str) -> str | None:
    """What of the runner's configuration the change from ``before`` to ``after`` touches (its
    name, for a refusal's reason), or None."""
    name = PurePosixPath(path).name
    if name in PYTEST_SETTINGS and pytest_settings(name, before) != pytest_settings(name, after):
        return "pytest's settings"
    if name in METADATA and entry_points(name, before) != entry_points(name, after):
        return f"the {ENTRY_POINT_GROUP} entry points pytest loads plugins from"
    return None


def pytest_settings(name: str, text: str) -> object:
    """The pytest part of a configuration file's text (a file that cannot be read is its own
    text, so any edit to it counts as a change)."""
    kind, section = PYTEST_SETTINGS[name]
    if kind == "toml":
        table: object = _toml(text)
        if isinstance(table, str):
            return table
        for key in section:
            table = table.get(key, {}) if isinstance(table, dict) else {}
        return table
    parser = _ini(text)
    if isinstance(parser, str):
        return parser
    return dict(parser[section[0]]) if parser.has_section(section[0]) else {}


def entry_points(name: str, text: str) -> object:
    """The pytest11 entry points a metadata file declares: every ``pytest11`` table of a
    pyproject (PEP 621, poetry, flit alike), setup.cfg's ``[options.entry_points]`` key, how
    often setup.py names the group, and an entry_points.txt whole."""
    if name == "entry_points.txt":
        return text
    if name == "setup.py":
        return text.count(ENTRY_POINT_GROUP)
    if name == "pyproject.toml":
        return _tables_named(_toml(text), ENTRY_POINT_GROUP)
    parser = _ini(text)
    if isinstance(parser, str):
        return parser
    if not parser.has_section("options.entry_points"):
        return ""
    return parser["options.entry_points"].get(ENTRY_POINT_GROUP, "")


def _tables_named(table: object, key: str) -> list:
    if not isinstance(table, dict):
        return []
    found = [table[key]] if key in table else []
    return found + [t for value in table.values() for t in _tables_named(value, key)]


def _toml(text: str) -> dict | str:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return text


def _ini(text: str) -> configparser.ConfigParser | str:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return text
    return parser
