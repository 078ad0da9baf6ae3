"""A reward is an attack surface: the checks that refuse a patch which makes tests pass without
fixing anything (the tamper guard, on by default in RL and golden-trajectory collection).

An RL policy finds every way to turn "the tests pass" into a reward: a root ``conftest.py``
whose hook reports failures as passes, a plugin loaded through ``addopts = -p ...``, a diff
header that ``git apply`` reads and a path check does not, library code that prints PASSED lines
and ends the process early. The official harness checks none of this (so ``eval`` keeps the
harness's verdicts unless asked); the guard judges every patch by what it does, in three steps:

1. the text, before anything runs: every file header must be one this module reads the way
   ``git apply`` does (``a/``/``b/`` prefixes, no quoting), else the paths are unknowable;
2. the effect, after the patch is applied: git's own list of what changed must hold no test
   file, no file the test patch touches, no test configuration (``pytest.ini``; the pytest
   section of ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), no interpreter start-up hook
   (``sitecustomize``, ``.pth``), no symlink, no path the text did not name, and no source file
   newly reaching into the test runner (its internals, its hooks, its report words, its exit);
3. the run, after the eval script: a pytest run must end the way one ends, its summary line
   last, with no test status printed after it.

A refusal is a verdict of 0 with its reason (``apply_status`` names the check), never an error.
"""

from __future__ import annotations

import configparser
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.grading.patches import is_test_path, touched_paths
from sweflow.sandbox import Sandbox, SandboxFileError

REFUSALS = ("touches_tests", "unreadable_paths", "symlink", "tampers_runner", "abnormal_end")
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
# The pytest settings of each configuration file that may hold them: (format, section path).
PYTEST_SETTINGS = {
    "pytest.ini": ("ini", ("pytest",)),
    ".pytest.ini": ("ini", ("pytest",)),
    "tox.ini": ("ini", ("pytest",)),
    "setup.cfg": ("ini", ("tool:pytest",)),
    "pyproject.toml": ("toml", ("tool", "pytest")),
}
# Source that reaches into the test runner; counted per file before and after the patch, so a
# runner's own code (pytest's repository) may keep what it already has.
RUNNER_REACH = {
    "pytest internals": re.compile(r"\b_pytest\b"),
    "a pytest hook": re.compile(
        r"\bpytest_(?:runtest|collect|report|sessionfinish|configure|"
        r"terminal|make|load|plugin|cmdline|addoption)\w*"
    ),  # fmt: skip
    "pytest plugin loading": re.compile(r"\bpytest_plugins\b|\bhook(?:impl|wrapper)\b"),
    "a test report": re.compile(r"\bTestReport\b|\bTestResult\b|\bTextTestRunner\b"),
    "an abrupt exit": re.compile(r"\bos\._exit\b|\batexit\b"),
    "the runner's modules": re.compile(r"sys\.modules\[\s*['\"](?:_?pytest|unittest)"),
    "a test status word": re.compile(r"['\"](?:PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED)\b"),
}
PYTEST_PARSERS = frozenset({"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"})
_STATUS_LINE = re.compile(r"^(?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s")
_SUMMARY_LINE = re.compile(r"^=+ .*\bin \d+(?:\.\d+)?s\b.* =+$")


@dataclass(frozen=True)
class Refusal:
    """Why a patch earns nothing: ``status`` is one of :data:`REFUSALS`."""

    status: str
    reason: str


# -- 1. the text -------------------------------------------------------------------------------
def read_paths(patch: str) -> set[str] | Refusal:
    """The repository paths of every file header, read as ``git apply -p1`` reads them, or a
    refusal when a header is quoted, has another prefix, or cannot be parsed."""
    try:
        files = PatchSet(patch)
    except UnidiffParseError as exc:
        return Refusal("unreadable_paths", f"the patch cannot be parsed: {exc}")
    headers = len(re.findall(r"^diff --git ", patch, re.M))
    if headers and headers != len(files):
        return Refusal("unreadable_paths", "a `diff --git` header that no parser reads as git does")
    paths: set[str] = set()
    for file in files:
        for raw, prefix in ((file.source_file, "a/"), (file.target_file, "b/")):
            if raw == "/dev/null":
                continue
            if '"' in raw or not raw.startswith(prefix) or not raw[len(prefix) :]:
                return Refusal("unreadable_paths", f"a file header names {raw!r}, not {prefix}PATH")
            paths.add(raw[len(prefix) :])
    return paths | touched_paths(patch)


# -- 2. the effect -----------------------------------------------------------------------------
def check_effect(
    sandbox: Sandbox, workdir: str, text_paths: set[str], test_patch: str, timeout: float
) -> Refusal | None:
    """Refuse what the applied patch changed in ``workdir`` (see the module docstring)."""
    changed = _changed_paths(sandbox, workdir, timeout)
    leftovers = {
        p
        for p in changed
        if PurePosixPath(p).suffix in (".orig", ".rej") and p.rsplit(".", 1)[0] in text_paths
    }  # what `patch --fuzz` and --reject leave
    changed -= leftovers
    if unnamed := sorted(changed - text_paths):
        return Refusal("unreadable_paths", f"git changed {unnamed}, which the patch does not name")
    tests = touched_paths(test_patch) if test_patch else set()
    hooks = [p for p in changed if p in tests or is_test_path(p) or _startup_hook(p)]
    if hooks:
        return Refusal("touches_tests", f"the patch changes tests or test hooks: {sorted(hooks)}")
    for path in sorted(changed):
        before, after = _versions(sandbox, workdir, path, timeout)
        name = PurePosixPath(path).name
        if name in PYTEST_SETTINGS and _pytest_settings(name, before) != _pytest_settings(
            name, after
        ):
            return Refusal("touches_tests", f"the patch changes pytest's settings in {path}")
        if path.endswith(".py"):
            for what, pattern in RUNNER_REACH.items():
                if len(pattern.findall(after)) > len(pattern.findall(before)):
                    return Refusal("tampers_runner", f"{path} newly reaches into {what}")
    links = _symlinks(sandbox, workdir, sorted(changed), timeout)
    if links:
        return Refusal("symlink", f"the patch makes symlinks: {links}")
    return None


def _changed_paths(sandbox: Sandbox, workdir: str, timeout: float) -> set[str]:
    """Every path git sees changed, added or removed against HEAD, untracked files included."""
    out = sandbox.exec(
        "git -c core.quotepath=off status --porcelain=v1 -z --untracked-files=all",
        timeout=timeout, cwd=workdir,
    ).output  # fmt: skip
    paths: set[str] = set()
    entries = iter(out.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        paths.add(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the source path follows
            paths.add(next(entries, ""))
    return paths - {""}


def _versions(sandbox: Sandbox, workdir: str, path: str, timeout: float) -> tuple[str, str]:
    """The file's text at HEAD and now ("" where it does not exist, or is not a file)."""
    before = sandbox.exec(f"git show HEAD:{shlex.quote(path)} 2>/dev/null", timeout=timeout,
                          cwd=workdir)  # fmt: skip
    try:
        after = sandbox.read(f"{workdir}/{path}").decode(errors="replace")
    except SandboxFileError:
        after = ""
    return before.output if before.exit_code == 0 else "", after


def _startup_hook(path: str) -> bool:
    name = PurePosixPath(path).name
    return name in STARTUP_HOOKS or name.endswith(".pth")


def _pytest_settings(name: str, text: str) -> object:
    """The pytest part of a configuration file's text (a file that cannot be read is its own
    text, so any edit to it counts as a change)."""
    kind, section = PYTEST_SETTINGS[name]
    try:
        if kind == "toml":
            value: object = tomllib.loads(text)
            for key in section:
                value = value.get(key, {}) if isinstance(value, dict) else {}
            return value
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        return dict(parser[section[0]]) if parser.has_section(section[0]) else {}
    except (tomllib.TOMLDecodeError, configparser.Error):
        return text


def _symlinks(sandbox: Sandbox, workdir: str, paths: list[str], timeout: float) -> list[str]:
    if not paths:
        return []
    probe = " ".join(shlex.quote(p) for p in paths)
    out = sandbox.exec(f"for p in {probe}; do [ -L \"$p\" ] && echo \"$p\"; done; true",
                       timeout=timeout, cwd=workdir).output  # fmt: skip
    return [line for line in out.splitlines() if line]


# -- 3. the run --------------------------------------------------------------------------------
def check_run(log: str, log_parser: str) -> Refusal | None:
    """Refuse a pytest run that did not end as pytest ends: test statuses without a summary
    line after them (the process left early, or something printed statuses after pytest)."""
    if log_parser not in PYTEST_PARSERS:
        return None
    start, end = log.find(START_TEST_OUTPUT), log.rfind(END_TEST_OUTPUT)
    lines = log[start if start >= 0 else 0 : end if end >= 0 else len(log)].splitlines()
    lines = [line for line in lines if not line.startswith("+")]  # the script's own xtrace
    last_summary = max((i for i, line in enumerate(lines) if _SUMMARY_LINE.match(line)), default=-1)
    late = [line for line in lines[last_summary + 1 :] if _STATUS_LINE.match(line)]
    if late:
        where = "after pytest's summary" if last_summary >= 0 else "with no pytest summary"
        return Refusal("abnormal_end", f"the test run printed statuses {where}: {late[0]!r}")
    return None
