"""The committed learning set (data/learn, `sweflow synth -c configs/synth-learn.yaml`) and its
test split (data/learn-test, `configs/synth-learn-test.yaml`).

Static checks on every task: the split holds whole projects out, there are enough tasks on each
side, the test split's projects are used nowhere else, every task fails before its fix, and no
statement says where the bug is (the changed file or a changed line). The synthesis validated
every task as `sweflow env validate` does.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from unidiff import PatchSet

from sweflow.bench.learn import leak_rate
from sweflow.instances import Instance, load_instances
from sweflow.pipeline.sections import SplitSection
from sweflow.synth.config import load_config
from sweflow.synth.leaks import gold_file_leaks

ROOT = Path(__file__).resolve().parents[2]
LEARN = ROOT / "data" / "learn"
TEST = ROOT / "data" / "learn-test"
LEARN_REPOS = {t.repo for t in load_instances(LEARN / "tasks.jsonl").raise_for_errors()}


@pytest.fixture(scope="module", params=[LEARN, TEST], ids=["learn", "learn-test"])
def tasks(request) -> list[Instance]:
    return load_instances(request.param / "tasks.jsonl").raise_for_errors()


def test_the_test_split_is_of_projects_nothing_else_uses() -> None:
    config = load_config(ROOT / "configs" / "synth-learn-test.yaml")
    assert config.out == (TEST / "tasks.jsonl").resolve()
    test = Counter(t.repo for t in load_instances(TEST / "tasks.jsonl").raise_for_errors())
    assert sum(test.values()) >= 40 and len(test) >= 3, test
    elsewhere = {
        t.repo
        for data in (LEARN, ROOT / "data" / "demo")
        for t in load_instances(data / "tasks.jsonl").raise_for_errors()
    }
    assert not set(test) & elsewhere


def test_the_split_holds_out_whole_projects_and_both_sides_are_big_enough() -> None:
    tasks = load_instances(LEARN / "tasks.jsonl").raise_for_errors()
    config = load_config(ROOT / "configs" / "synth-learn.yaml")
    assert config.out == (LEARN / "tasks.jsonl").resolve()
    split = SplitSection(**json.loads((LEARN / "split.json").read_text()))
    assert split.by == "repo" and split.eval == config.split.eval
    per_repo = Counter(t.repo for t in tasks)
    held = set(split.eval)
    train = {repo: n for repo, n in per_repo.items() if repo not in held}
    heldout = {repo: n for repo, n in per_repo.items() if repo in held}
    assert sum(train.values()) >= 300 and len(train) >= 8, train
    assert sum(heldout.values()) >= 40 and len(heldout) >= 2, heldout
    assert len(per_repo) >= 10
    assert len({t.instance_id for t in tasks}) == len(tasks)
    bundles = {p.name for p in (LEARN / "repos").glob("*.bundle")}
    assert bundles == {f"{repo.replace('/', '__')}.bundle" for repo in per_repo}


def test_every_task_fails_before_its_fix_and_hides_its_failing_tests(tasks) -> None:
    for task in tasks:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS, task.instance_id
        hidden = {t.split("::")[0] for t in task.FAIL_TO_PASS}
        restored = {p.path for p in PatchSet(task.test_patch)}
        assert hidden <= restored, task.instance_id
        assert [p.path for p in PatchSet(task.patch)] == [task.synth["file"]], task.instance_id


def test_no_statement_names_the_changed_file_or_line(tasks) -> None:
    for task in tasks:
        text = task.problem_statement
        # no pasted traceback (its frames name files and lines); a test's own assertion may
        # compare traceback texts (glom's error tests do)
        assert not re.search(r'^\s*File "[^"]+", line \d+', text, re.M), task.instance_id
        assert "Traceback (most recent call last):\n" not in text, task.instance_id
        assert task.FAIL_TO_PASS[0] in text, task.instance_id
        for patched in PatchSet(task.patch):
            tail = re.escape(patched.path.rsplit("/", 1)[-1])
            assert not re.search(rf"(?<![\w.-]){tail}(?![\w-])", text), task.instance_id
            for hunk in patched:
                for line in range(hunk.source_start, hunk.source_start + hunk.source_length):
                    assert not re.search(rf"\bline {line}\b|\.py:{line}\b", text), task.instance_id
        assert not re.search(rf"\bline {task.synth['line']}\b", text), task.instance_id


def test_the_leak_check_sees_dotted_modules_and_test_files(tasks) -> None:
    """A statement that never writes ``itertoolz.py`` still gives it away through a dotted import
    or a failing ``test_itertoolz.py``; the learning benchmark reports the share per split."""
    assert gold_file_leaks("from toolz.itertoolz import get", ["toolz/itertoolz.py"]) == ["module"]
    assert gold_file_leaks("from toolz import (a,\n itertoolz)", ["toolz/itertoolz.py"]) == [
        "module"
    ]
    assert gold_file_leaks("`toolz/tests/test_itertoolz.py::t`", ["toolz/itertoolz.py"]) == [
        "test_file"
    ]
    assert gold_file_leaks("see itertoolz.py", ["toolz/itertoolz.py"]) == ["file"]
    assert not gold_file_leaks("the toolz package's get fails", ["toolz/itertoolz.py"])
    assert not gold_file_leaks("import utils", ["utils.py"])  # a bare word is not a path
    held = set(json.loads((LEARN / "split.json").read_text())["eval"])
    evaluated = [t for t in tasks if t.repo in held or t.repo not in LEARN_REPOS]  # dev or test
    rate = leak_rate(evaluated)
    print(
        f"evaluated statements that name their gold file some way: {rate:.0%} of {len(evaluated)}"
    )
    assert 0 < rate < 1  # both kinds are there: the figure is worth reporting, not a constant
