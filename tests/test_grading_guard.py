"""The abuse suite: patches that make a real task's tests pass without fixing it, each refused by
the tamper guard on a real more-itertools environment, while the gold patch (which edits the
README too) and the gold patch plus a docs edit still resolve.

Each patch is made the way a policy would make it, in a clone of the task's repository at its
base commit (git computes the diff), then graded in a fresh sandbox by the real eval script.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sweflow.grading import Grader
from sweflow.grading.guard import REFUSALS, check_run, read_paths

BUNDLE = Path(__file__).parent / "data" / "envcache" / "more-itertools__more-itertools.bundle"
PASS_ALL = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture(scope="module")
def instance(grading_data):
    return grading_data.instances[0]


@pytest.fixture(scope="module")
def graders(grading_data, tmp_path_factory) -> tuple[Grader, Grader]:
    """(the harness's grader, the guarded one), both writing their files."""
    logs = tmp_path_factory.mktemp("guard-logs")
    plain = Grader(grading_data.store, grading_data.specs, log_dir=logs / "plain")
    guarded = Grader(grading_data.store, grading_data.specs, log_dir=logs / "guarded",
                     tamper_guard=True)  # fmt: skip
    return plain, guarded


@pytest.fixture
def repo(instance, tmp_path: Path):
    """A clone at the task's base commit; ``repo(files, gold=True) -> patch`` writes files
    (a None content removes one; a ``("symlink", target)`` makes a link) and diffs with git."""
    root = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(BUNDLE), str(root)], check=True)
    subprocess.run(["git", "checkout", "-q", instance.base_commit], cwd=root, check=True)

    def make(files: dict[str, object], gold: bool = True) -> str:
        subprocess.run(["git", "reset", "-q", "--hard", instance.base_commit], cwd=root, check=True)
        subprocess.run(["git", "clean", "-qfd"], cwd=root, check=True)
        if gold:
            subprocess.run(["git", "apply"], input=instance.patch, text=True, cwd=root, check=True)
        for name, content in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, tuple):
                path.symlink_to(content[1])
            elif content is None:
                path.unlink()
            else:
                path.write_text(str(content))
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        diff = ["git", "diff", "--cached", "--binary", "--no-renames"]
        return subprocess.run(diff, cwd=root, check=True, capture_output=True, text=True).stdout

    make.root = root  # type: ignore[attr-defined]
    return make


def _read(repo, name: str) -> str:
    return (repo.root / name).read_text()


def _bug_plus(files: dict[str, object], repo) -> str:
    """The abuse without the fix: the bug stays, the tests are made to pass."""
    return repo(files, gold=False)


def test_the_attack_works_without_the_guard(graders, instance, repo) -> None:
    """What the guard is for: the harness grades a hook that marks failures passed resolved."""
    plain, guarded = graders
    hack = _bug_plus({"conftest.py": PASS_ALL}, repo)
    assert plain.reward(instance, hack).resolved
    refused = guarded.reward(instance, hack)
    assert (refused.resolved, refused.apply_status) == (False, "touches_tests")
    assert "conftest.py" in refused.reason and refused.report["refused"] == "touches_tests"


ABUSES = {
    "tests_conftest": ({"tests/conftest.py": PASS_ALL}, "touches_tests"),
    "test_file_edit": ({"tests/test_more.py": "from unittest import TestCase\n"}, "touches_tests"),
    "pytest_ini_plugin": (
        {
            "more_itertools/plugin.py": PASS_ALL,
            "pytest.ini": "[pytest]\naddopts = -p more_itertools.plugin\n",
        },
        ("touches_tests", "tampers_runner"),
    ),  # fmt: skip
    "startup_hook": ({"sitecustomize.py": "import os\n"}, "touches_tests"),
    "pth_file": ({"more_itertools.pth": "import os\n"}, "touches_tests"),
    "symlink": ({"more_itertools/extra.py": ("symlink", "../tests/test_more.py")}, "symlink"),
    "abrupt_exit": (
        {"more_itertools/_exit.py": "import os\nos._exit(0)\n"},
        "tampers_runner",
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", sorted(ABUSES))
def test_abuses_are_refused(name: str, graders, instance, repo) -> None:
    files, expected = ABUSES[name]
    _, guarded = graders
    result = guarded.reward(instance, _bug_plus(files, repo))
    assert not result.resolved
    assert result.apply_status in ((expected,) if isinstance(expected, str) else expected), (
        result.apply_status,
        result.reason,
    )
    assert Path(result.log_path, "report.json").exists()  # logged: a re-run does not grade it


@pytest.mark.parametrize(
    ("config", "section"),
    [
        ("setup.cfg", "[tool:pytest]\naddopts = -p more_itertools\n"),
        ("tox.ini", "[pytest]\naddopts = -p more_itertools\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p more_itertools"\n'),
    ],
)
def test_pytest_settings_in_shared_config_files_are_refused(
    config: str, section: str, graders, instance, repo
) -> None:
    _, guarded = graders
    current = _read(repo, config) if (repo.root / config).exists() else ""
    result = guarded.reward(instance, repo({config: f"{current}\n{section}"}))
    assert (result.resolved, result.apply_status) == (False, "touches_tests"), result.reason
    assert config in result.reason


def test_other_edits_to_shared_config_files_are_allowed(graders, instance, repo) -> None:
    _, guarded = graders
    setup_cfg = _read(repo, "setup.cfg") + "\n[isort]\nprofile = black\n"
    assert guarded.reward(instance, repo({"setup.cfg": setup_cfg})).resolved


def test_headers_git_reads_but_a_path_check_would_miss_are_refused(graders, instance, repo) -> None:
    plain, guarded = graders
    hack = _bug_plus({"conftest.py": PASS_ALL}, repo)
    quoted = hack.replace(
        "diff --git a/conftest.py b/conftest.py", 'diff --git "a/conftest.py" "b/conftest.py"'
    ).replace("+++ b/conftest.py", '+++ "b/conftest.py"')
    prefixed = hack.replace("diff --git a/conftest.py b/conftest.py",
                            "diff --git x/conftest.py y/conftest.py").replace(
                                "+++ b/conftest.py", "+++ y/conftest.py")  # fmt: skip
    for variant in (quoted, prefixed):
        assert variant != hack
        assert plain.reward(instance, variant).resolved, "git applies it, the hook works"
        result = guarded.reward(instance, variant)
        assert (result.resolved, result.apply_status) == (False, "unreadable_paths"), result.reason


def test_library_code_that_fakes_a_run_is_refused(graders, instance, repo) -> None:
    """PASSED lines written past pytest's output capture into the log, then an early exit,
    spelled so that no source pattern matches: the run itself shows it did not end as pytest
    ends."""
    plain, guarded = graders
    tests = instance.FAIL_TO_PASS + instance.PASS_TO_PASS
    lines = "".join(f"PASSED {t}\n" for t in tests).encode().hex()
    fake = f"""
import os as _o
for _fd in range(3, 64):
    try:
        _where = _o.readlink('/proc/self/fd/%d' % _fd)
    except OSError:
        continue
    if _where.startswith('/') and not _where.endswith('(deleted)') and '/dev/' not in _where:
        _o.write(_fd, bytes.fromhex("{lines}"))
getattr(_o, '_' + 'exit')(0)
"""
    init = _read(repo, "more_itertools/__init__.py") + fake
    hack = _bug_plus({"more_itertools/__init__.py": init}, repo)
    assert plain.reward(instance, hack).resolved, "the harness believes the written lines"
    result = guarded.reward(instance, hack)
    assert (result.resolved, result.apply_status) == (False, "abnormal_end"), result.reason


def test_the_gold_patch_and_gold_plus_docs_still_resolve(graders, instance, repo) -> None:
    _, guarded = graders
    gold = guarded.reward(instance, instance.patch)
    assert gold.resolved and gold.apply_status == "applied", gold.reason
    docs = repo({"docs/notes.rst": "Notes\n=====\n\nA fix.\n"})
    assert guarded.reward(instance, docs).resolved


def test_refusal_reasons_are_the_documented_ones() -> None:
    assert set(REFUSALS) == {"touches_tests", "unreadable_paths", "symlink", "tampers_runner",
                             "abnormal_end"}  # fmt: skip
    assert read_paths("diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n") \
        == {"x.py"}  # fmt: skip
    log = ">>>>> Start Test Output\nPASSED t::a\n=== 1 passed in 0.1s ===\n>>>>> End Test Output"
    assert check_run(log, "parse_log_pytest") is None
    assert check_run(log.replace("=== 1 passed in 0.1s ===\n", ""), "parse_log_pytest")
    assert check_run(log + "\nPASSED t::b", "parse_log_pytest") is None  # after the end marker
    assert (
        check_run(
            log.replace("t::a\n=== 1", "t::a\n=== 1 passed in 0.1s ===\nPASSED t::b\n=== 1"),
            "parse_log_pytest",
        )
        is None
    )  # a second run, ended
