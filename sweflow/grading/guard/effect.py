"""The guard's second check, on the work tree once the patch is applied: what git says changed.

Changed means every path whose content differs from HEAD (``git diff HEAD``: the work tree
and the index, which ``git apply --3way`` writes) and every file git does not track that was
not there before the patch (``git ls-files --others`` without ``--exclude-standard``: no
.gitignore, info/exclude or core.excludesFile hides one; files that were already untracked,
an install's build output, are listed before the patch and left out). None of those may be a
test file, a file the test patch touches, an interpreter start-up hook, a symlink, a path the
patch's text did not name, or the runner's configuration (sweflow.grading.guard.config); and
no source file may newly spell its way into the test runner (its internals, hooks, report
words, exit), a cheap first look that the run check does not depend on.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

from sweflow.grading.guard.base import Refusal
from sweflow.grading.guard.config import is_startup_hook, runner_config_change
from sweflow.grading.patches import is_test_path, touched_paths
from sweflow.sandbox import Sandbox, SandboxFileError

# Source that reaches into the test runner; counted per file before and after the patch, so a
# runner's own code (pytest's repository) may keep what it already has.
RUNNER_REACH = {
    "pytest internals": re.compile(r"\b_pytest\b"),
    "a pytest hook": re.compile(
        r"\bpytest_(?:runtest|collect|report|sessionfinish|configure|"
        r"terminal|make|load|plugin|cmdline|addoption)\w*"
    ),
    "pytest plugin loading": re.compile(r"\bpytest_plugins\b|\bhook(?:impl|wrapper)\b"),
    "a test report": re.compile(r"\bTestReport\b|\bTestResult\b|\bTextTestRunner\b"),
    "an abrupt exit": re.compile(r"\bos\._exit\b|\batexit\b"),
    "the runner's modules": re.compile(r"sys\.modules\[\s*['\"](?:_?pytest|unittest)"),
    "a test status word": re.compile(r"['\"](?:PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED)\b"),
}
UNTRACKED = "git -c core.quotepath=off ls-files -z --others"
CHANGED = "git -c core.quotepath=off diff -z --name-only --no-renames HEAD"


def untracked_files(sandbox: Sandbox, workdir: str, timeout: float) -> frozenset[str]:
    """Every file in ``workdir`` that git does not track, ignored or not (the baseline taken
    before the patch, so that files already there are not counted as the patch's)."""
    out = sandbox.exec(UNTRACKED, timeout=timeout, cwd=workdir).output
    return frozenset(p for p in out.split("\0") if p)


def check_effect(
    sandbox: Sandbox,
    workdir: str,
    text_paths: set[str],
    test_patch: str,
    timeout: float,
    untracked_before: frozenset[str] = frozenset(),
) -> Refusal | set[str]:
    """Refuse what the applied patch changed in ``workdir`` (see the module docstring), or
    return the changed paths (the run check's plugin is told them)."""
    changed = changed_paths(sandbox, workdir, timeout, untracked_before)
    leftovers = {
        p
        for p in changed
        if PurePosixPath(p).suffix in (".orig", ".rej") and p.rsplit(".", 1)[0] in text_paths
    }  # what `patch --fuzz` and --reject leave
    changed -= leftovers
    if unnamed := sorted(changed - text_paths):
        return Refusal("unreadable_paths", f"git changed {unnamed}, which the patch does not name")
    examined = changed | text_paths  # a file already untracked that the patch edits, too
    tests = touched_paths(test_patch) if test_patch else set()
    hooks = [p for p in examined if p in tests or is_test_path(p) or is_startup_hook(p)]
    if hooks:
        return Refusal("touches_tests", f"the patch changes tests or test hooks: {sorted(hooks)}")
    for path in sorted(examined):
        before, after = _versions(sandbox, workdir, path, timeout)
        if what := runner_config_change(path, before, after):
            return Refusal("touches_tests", f"the patch changes {what} in {path}")
        if path.endswith(".py"):
            for what, pattern in RUNNER_REACH.items():
                if len(pattern.findall(after)) > len(pattern.findall(before)):
                    return Refusal("tampers_runner", f"{path} newly reaches into {what}")
    links = _symlinks(sandbox, workdir, sorted(changed), timeout)
    if links:
        return Refusal("symlink", f"the patch makes symlinks: {links}")
    return changed


def changed_paths(
    sandbox: Sandbox, workdir: str, timeout: float, untracked_before: frozenset[str]
) -> set[str]:
    """Every path that differs from HEAD, and every untracked file new since the baseline."""
    out = sandbox.exec(CHANGED, timeout=timeout, cwd=workdir).output
    tracked = {p for p in out.split("\0") if p}
    return tracked | (untracked_files(sandbox, workdir, timeout) - untracked_before)


def _versions(sandbox: Sandbox, workdir: str, path: str, timeout: float) -> tuple[str, str]:
    """The file's text at HEAD and now ("" where it does not exist, or is not a file)."""
    before = sandbox.exec(
        f"git show HEAD:{shlex.quote(path)} 2>/dev/null", timeout=timeout, cwd=workdir
    )
    try:
        after = sandbox.read(f"{workdir}/{path}").decode(errors="replace")
    except SandboxFileError:
        after = ""
    return before.output if before.exit_code == 0 else "", after


def _symlinks(sandbox: Sandbox, workdir: str, paths: list[str], timeout: float) -> list[str]:
    if not paths:
        return []
    probe = " ".join(shlex.quote(p) for p in paths)
    out = sandbox.exec(
        f'for p in {probe}; do [ -L "$p" ] && echo "$p"; done; true', timeout=timeout, cwd=workdir
    ).output
    return [line for line in out.splitlines() if line]
