"""From a validated bug to a SWE-bench-format task, the way SWE-smith lays tasks out.

The task's ``base_commit`` holds the bug and lacks the test files that contain its
FAIL_TO_PASS tests (the agent must not read the answer key); ``test_patch`` restores those files
and ``patch`` (the gold fix) reverts the bug. Commits are written with git plumbing through a
throwaway index, so many tasks can be made at once and the work tree is never touched. Every
task commit has the same message (``TASK_MESSAGE``): /testbed is an export of that one commit
(``envcache.repos.export_commit``), so its message is all of the history an agent can read.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from sweflow.harness.evalscript import DEFAULT_EVAL_TYPE, DEFAULT_LOG_PARSER, make_eval_script
from sweflow.harness.specs import EnvSpec
from sweflow.instances import Instance
from sweflow.synth.reproduction import standalone
from sweflow.synth.sources import SourceRepo, git

ACTIVATE = ". /opt/sweflow/venv/bin/activate"  # the environment builder's venv
STATEMENT_TESTS = 5  # failing tests quoted in a problem statement
# Object addresses in failure messages differ between runs: one spelling keeps datasets identical.
# pytest shortens a long repr in the middle, so an address can also end one with its 0x cut off
# ("[(<test_itert...fd60a4c0250>)]").
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b|(?<=\.\.\.)[0-9a-fA-F]{4,}(?=>)")
# The message of every task commit: `git log` and `git show` in /testbed print it, so it says
# nothing of the bug (it said "Synthesized bug: change_constant in toolz/itertoolz.py:144").
TASK_MESSAGE = "Snapshot of the project"


@dataclass(frozen=True)
class Bug:
    """A validated candidate: the mutated file and the tests it moves."""

    file: str
    operator: str
    site: int
    line: int
    code: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    messages: dict[str, str]


def test_file_of(test: str) -> str:
    """``tests/test_a.py::Class::test_b[1]`` -> ``tests/test_a.py``."""
    return test.split("::", 1)[0]


def make_task(repo: SourceRepo, spec: EnvSpec, bug: Bug) -> Instance:
    """Commit the bug (hidden tests removed) and describe it as an instance."""
    source = repo.source
    hidden = sorted({test_file_of(t) for t in bug.fail_to_pass})
    commit = _commit_bug(repo, bug, hidden)
    fix = _diff(repo, commit, repo.base_commit, [bug.file])
    test_patch = _diff(repo, commit, repo.base_commit, hidden)
    digest = hashlib.sha256(fix.encode()).hexdigest()[:8]
    instance_id = f"{source.slug}-{source.version}.{bug.operator}__{digest}"
    git(repo.root, "update-ref", f"refs/tasks/{instance_id}", commit)
    instance = Instance(
        instance_id=instance_id,
        repo=source.repo,
        base_commit=commit,
        patch=fix,
        test_patch=test_patch,
        problem_statement=problem_statement(
            source.repo, bug, _sources(repo, hidden), _beside(repo, hidden)
        ),
        created_at="2000-01-01T00:00:00Z",
        version=source.version,
        FAIL_TO_PASS=bug.fail_to_pass,
        PASS_TO_PASS=bug.pass_to_pass,
        environment_setup_commit=repo.base_commit,
        image=f"sweflow/sweb.eval.x86_64.{instance_id.lower()}:latest",
        log_parser=DEFAULT_LOG_PARSER,
        eval_type=DEFAULT_EVAL_TYPE,
        synth={
            "source": source.text,
            "operator": bug.operator,
            "file": bug.file,
            "line": bug.line,
            "site": bug.site,
        },
    )
    instance.eval_script = make_eval_script(instance, spec, activate=ACTIVATE)
    return instance


def problem_statement(
    repo: str,
    bug: Bug,
    test_sources: Mapping[str, str],
    beside: Mapping[str, AbstractSet[str]] | None = None,
) -> str:
    """An issue text as a user would write it: the failing tests with their messages and a
    reproduction to paste (the first failing test that stands alone, from ``test_sources``:
    test file -> its source; ``beside``: test file -> the modules in its folder), never naming
    the file the bug is in nor pasting a traceback."""
    shown = bug.fail_to_pass[:STATEMENT_TESTS]
    lines = [
        f"Regression in {repo.split('/')[-1]}: {len(bug.fail_to_pass)} test(s) now fail",
        "",
        "After a recent change, these tests of the project fail although the behaviour they "
        "check is correct:",
        "",
    ]
    for test in shown:
        message = _ADDRESS.sub("0x...", bug.messages.get(test, ""))
        if _names(message, bug):
            message = ""
        lines.append(f"- `{test}`" + (f": {message}" if message else ""))
    if len(bug.fail_to_pass) > len(shown):
        lines.append(f"- ... and {len(bug.fail_to_pass) - len(shown)} more")
    if found := _reproduction(bug, test_sources, beside or {}):
        test, script = found
        lines += ["", f"To reproduce, run this (it is `{test}` on its own):", "", "```python"]
        lines += [script.rstrip("\n"), "```"]
    lines += [
        "",
        "Please fix the library code so that these tests pass again; do not change the tests.",
    ]
    return "\n".join(lines) + "\n"


def _reproduction(
    bug: Bug, test_sources: Mapping[str, str], beside: Mapping[str, AbstractSet[str]]
) -> tuple[str, str] | None:
    """(test id, script) of the first failing test that runs on its own, if any does."""
    for test in bug.fail_to_pass:
        file, _, name = test.partition("::")
        if file not in test_sources:
            continue
        script = standalone(test_sources[file], name, beside.get(file, frozenset()))
        if script and not _names(script, bug):
            return test, script
    return None


def _names(text: str, bug: Bug) -> bool:
    """Whether ``text`` names the bug's file (as a path ending in its name) or its line."""
    name = re.escape(bug.file.rsplit("/", 1)[-1])
    return bool(re.search(rf"(?<![\w.-]){name}(?![\w-])|\bline {bug.line}\b", text))


def _sources(repo: SourceRepo, files: list[str]) -> dict[str, str]:
    """The test files' sources at the clean commit (the reproduction is taken from them)."""
    return {f: git(repo.root, "show", f"{repo.base_commit}:{f}") for f in files}


def _beside(repo: SourceRepo, files: list[str]) -> dict[str, frozenset[str]]:
    """The modules (``.py`` files and folders) in each test file's folder below the root: a
    test may import them (``from common import ...``) because pytest puts that folder on the
    path, which a script run from the root does not have."""
    found = {}
    for file in files:
        folder = file.rpartition("/")[0]
        if folder:
            names = git(repo.root, "ls-tree", "--name-only", repo.base_commit, f"{folder}/")
            found[file] = frozenset(
                n.rsplit("/", 1)[-1].removesuffix(".py") for n in names.splitlines()
            )
    return found


def _commit_bug(repo: SourceRepo, bug: Bug, hidden: list[str]) -> str:
    root = repo.root
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": os.path.join(scratch, "index")}
        git(root, "read-tree", repo.base_commit, env=env)
        mode = git(root, "ls-tree", repo.base_commit, "--", bug.file).split()[0]
        blob = git(root, "hash-object", "-w", "--stdin", stdin=bug.code).strip()
        git(root, "update-index", "--cacheinfo", f"{mode},{blob},{bug.file}", env=env)
        git(root, "update-index", "--force-remove", "--", *hidden, env=env)
        tree = git(root, "write-tree", env=env).strip()
    return commit_task_tree(root, tree, repo.base_commit)


def commit_task_tree(root: Path, tree: str, parent: str) -> str:
    """The task commit of ``tree`` on the clean ``parent``: ``TASK_MESSAGE``, and the fixed
    identity and date of ``sources.git``, so that a tree gives the same commit id everywhere."""
    return git(root, "commit-tree", tree, "-p", parent, "-m", TASK_MESSAGE).strip()


def _diff(repo: SourceRepo, old: str, new: str, paths: list[str]) -> str:
    return git(
        repo.root,
        "-c",
        "color.ui=false",
        "diff",
        "--no-ext-diff",
        "--no-renames",
        old,
        new,
        "--",
        *paths,
    )
