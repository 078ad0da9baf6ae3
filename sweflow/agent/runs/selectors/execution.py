"""``tests``: execution-based selection, as R2E-Gym's execution-based verifier ranks patches
by regression tests first and generated reproduction tests second, with only what an agent
may run itself.

Each candidate's patch goes into a fresh sandbox of the task's environment (the repository
at its base commit: no test patch is in it) and is scored by

1. has_change: the patch changes something (an empty patch cannot resolve anything);
2. tests: how many of the repository's existing tests pass, those in the test files (tracked at
   the base commit, sweflow.grading.patches.is_test_path) that name a module any candidate
   changes, at most :data:`MAX_TEST_FILES`,
   run with the environment's test command; the test files and any ``conftest.py`` the patch
   touches are restored first, so a patch cannot pass them by editing them;
3. scripts: how many of the reproduction scripts the samples wrote (the ``.py`` files their
   patches create) exit 0: every candidate runs every sample's scripts, so that a sample's fix
   is checked against the others' reproductions too.

The highest (has_change, tests, scripts) wins; a tie goes to the first sample. The hidden
FAIL_TO_PASS and PASS_TO_PASS tests and the test patch are never used: the selector never sees
them (sweflow.agent.runs.selectors.view).
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

from swebench.harness.log_parsers.python import parse_log_pytest
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.agent.runs.selectors import SelectorContext
from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView
from sweflow.envcache.builder import VENV_ACTIVATE
from sweflow.envcache.instance_spec import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError
from sweflow.grading.patches import is_test_path
from sweflow.harness.apply import apply_patch
from sweflow.harness.runlog import RunLog
from sweflow.harness.specs import SpecError, test_command
from sweflow.sandbox import ExecResult, Sandbox, open_sandbox

MAX_TEST_FILES = 8  # a bound on the time a candidate takes
FALLBACK_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"  # no spec, or a list of commands
NOT_SCRIPTS = frozenset({"conftest.py", "setup.py", "__init__.py"})  # created, yet no reproduction


@dataclass(frozen=True)
class Score:
    """What one candidate passed."""

    applied: bool
    has_change: bool
    tests_passed: int = 0
    tests_run: int = 0
    scripts_passed: int = 0
    scripts_run: int = 0

    def key(self) -> tuple[bool, int, int]:
        return (self.has_change and self.applied, self.tests_passed, self.scripts_passed)


def patch_files(patch: str) -> tuple[list[str], dict[str, str]]:
    """The repository files a patch changes, and the files it creates with their text."""
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError:
        return [], {}
    changed = [f.path for f in files if not f.is_added_file]
    created = {
        f.path: "".join(line.value for hunk in f for line in hunk if line.is_added)
        for f in files
        if f.is_added_file
    }
    return changed, created


def module_names(paths: list[str]) -> set[str]:
    """The module names a test of these Python files would import (a package's __init__: the
    package's name)."""
    names = set()
    for path in (PurePosixPath(p) for p in paths if p.endswith(".py")):
        name = path.parent.name if path.stem == "__init__" else path.stem
        if name.isidentifier():
            names.add(name)
    return names


class Tests:
    def __init__(self, context: SelectorContext) -> None:
        if context.store is None:
            raise ConfigError("the tests selector needs the layer store of the tasks")
        self.context = context
        self.store = LayerStore(context.store)

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        return await asyncio.to_thread(self._choose, task, candidates)

    def _choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        ordered = sorted(candidates, key=lambda c: c.index)
        parsed = {c.index: patch_files(c.patch) for c in ordered}
        modules = set().union(*(module_names(changed) for changed, _ in parsed.values()))
        scripts: dict[str, str] = {}  # text -> path: each distinct script once
        for _, created in parsed.values():
            for path, text in created.items():
                if path.endswith(".py") and PurePosixPath(path).name not in NOT_SCRIPTS:
                    scripts.setdefault(text, path)
        tests: list[str] | None = None
        scores: dict[int, Score] = {}
        for c in ordered:
            changed, created = parsed[c.index]
            touched = [*changed, *created]
            tests, scores[c.index] = self._score(task, c, touched, modules, tests, scripts)
        best = max(ordered, key=lambda c: scores[c.index].key())  # the first of equals
        s = scores[best.index]
        note = (
            f"{s.tests_passed} of {s.tests_run} tests in {len(tests or [])} file(s), "
            f"{s.scripts_passed} of {s.scripts_run} reproduction scripts"
        )
        return Choice(best.index, {i: asdict(v) for i, v in scores.items()}, note)

    def _score(
        self,
        task: TaskView,
        candidate: Candidate,
        touched: list[str],
        modules: set[str],
        tests: list[str] | None,
        scripts: dict[str, str],
    ) -> tuple[list[str], Score]:
        """The candidate in a fresh sandbox (the test files found in the first one)."""
        timeout = self.context.timeout_s
        spec = instance_sandbox_spec(self.store, task.instance_id)
        manifest = self.store.read_manifest(task.instance_id)
        activate = manifest.meta.get("activate", VENV_ACTIVATE) if manifest else VENV_ACTIVATE
        with open_sandbox(spec, self.context.backend) as sandbox:
            workdir = spec.workdir
            if tests is None:
                tests = _find_tests(sandbox, workdir, modules, timeout)
            has_change = bool(candidate.patch.strip())
            if has_change:
                log = RunLog(task.instance_id, None)
                applied = apply_patch(sandbox, candidate.patch, log, timeout).ok
                log.close()
                if not applied:
                    return tests, Score(applied=False, has_change=True)
                _restore(sandbox, workdir, [*tests, *touched], timeout)

            def run(command: str) -> ExecResult:
                return sandbox.exec(f"{activate} && {command}", timeout=timeout, cwd=workdir)

            outcomes: dict[str, str] = {}
            if tests:
                outcomes = parse_log_pytest(run(self._test_cmd(task, tests)).output, None)
            passed = sum(status == "PASSED" for status in outcomes.values())
            scripts_passed = 0
            for text, path in scripts.items():
                sandbox.write(f"{workdir}/{path}", text)
                runner = (
                    "python -m pytest -q -p no:cacheprovider" if is_test_path(path) else "python"
                )
                result = run(f"{runner} {shlex.quote(path)}")
                scripts_passed += result.exit_code == 0 and not result.timed_out
        score = Score(True, has_change, passed, len(outcomes), scripts_passed, len(scripts))
        return tests, score

    def _test_cmd(self, task: TaskView, files: list[str]) -> str:
        """The environment spec's test command on ``files`` (a spec of a command list, or none:
        pytest's)."""
        quoted = [shlex.quote(f) for f in files]
        try:
            spec = (
                self.context.specs.get(task.repo, task.version or "")
                if self.context.specs
                else None
            )
        except SpecError:
            spec = None
        if spec is not None and isinstance(spec.test_cmd, str) and spec.test_cmd:
            return test_command(spec, quoted)
        return " ".join([FALLBACK_TEST_CMD, *quoted])


def _find_tests(sandbox: Sandbox, workdir: str, modules: set[str], timeout: float) -> list[str]:
    """The tracked test files that name one of ``modules`` as a word; those named after one
    first, at most MAX_TEST_FILES."""
    if not modules:
        return []
    pattern = "|".join(sorted(modules))
    listed = sandbox.exec(
        f"git ls-files -z -- '*.py' | xargs -0 -r grep -lwE {shlex.quote(pattern)} --",
        timeout=timeout,
        cwd=workdir,
    )
    found = [p for p in listed.output.splitlines() if p.endswith(".py") and is_test_path(p)]
    named = [p for p in found if any(m in PurePosixPath(p).stem for m in modules)]
    return (named + [p for p in found if p not in named])[:MAX_TEST_FILES]


def _restore(sandbox: Sandbox, workdir: str, paths: list[str], timeout: float) -> None:
    """The test files (and any conftest.py) back as the base commit has them, so that a patch
    cannot pass the tests by editing them; a test file or conftest.py the patch created is
    removed (its reproduction scripts are written again when they run)."""
    chosen = [p for p in paths if is_test_path(p)]  # conftest.py included
    for path in chosen:
        quoted = shlex.quote(path)
        sandbox.exec(
            f"git checkout HEAD -- {quoted} 2>/dev/null || rm -f {quoted}",
            timeout=timeout,
            cwd=workdir,
        )
