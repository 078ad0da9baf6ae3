"""Run scores against the gold patch, on real replayed trajectories of demo tasks: the replay
teacher localises, edits inside the gold hunk, checks and submits; a run that submits at once
scores nothing but its submission."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sweflow.agent.runs.scores import LOOP, breakdown, expected_failure, rates, score_run
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory
from sweflow.instances import Instance


def test_replays_score_on_every_behaviour(demo_replays) -> None:
    out = demo_replays.collected
    by_id = {i.instance_id: i for i in demo_replays.data.rows}
    runs = [Trajectory.load(p) for p in sorted((out / "trajectories").glob("*/run-*.json"))]
    scored = [score_run(t, by_id[t.instance_id]) for t in runs if t.resolved]
    assert len(scored) == 3
    assert all(s.right_file and s.right_hunk and s.submitted and s.resolved for s in scored)
    assert all(s.valid_replies == s.replies > 2 for s in scored)
    assert not any(s.looped for s in scored)  # the reproduction runs twice, an edit between
    assert any(s.reproduced for s in scored)  # parse and toolz statements carry reproductions
    summary = rates(scored).as_dict()
    assert summary["right_file_rate"] == summary["resolved_rate"] == 1.0
    assert summary["valid_action_rate"] == 1.0 and summary["runs"] == 3


def test_a_run_that_submits_at_once_scores_nothing_else(demo_replays) -> None:
    instance = demo_replays.data.rows[0]
    idle = Trajectory(
        instance_id=instance.instance_id,
        exit_status="submitted",
        steps=[StepRecord(index=0), StepRecord(index=1, format_error="no block")],
    )
    score = score_run(idle, instance)
    assert (score.replies, score.valid_replies) == (2, 1)
    assert not (score.reproduced or score.right_file or score.right_hunk or score.resolved)
    assert not score.submitted  # an empty submission is not one
    assert rates([score]).as_dict()["valid_action_rate"] == 0.5
    patched = score_run(idle.model_copy(update={"patch": instance.patch}), instance)
    assert patched.submitted


def test_a_run_loops_when_one_action_fills_three_replies_in_a_row() -> None:
    """The fine-tuned student's usual failure: the same ``pytest`` until the step limit."""
    instance = Instance(instance_id="a__b-1", repo="a/b", base_commit="0" * 40)
    pytest_ = ActionRecord(tool=BASH, args={"command": "pytest -q"})
    edit = ActionRecord(
        tool=EDITOR,
        args={"command": "str_replace", "path": "/testbed/a.py", "old_str": "a", "new_str": "b"},
    )

    def looped(*replies: ActionRecord | None) -> bool:
        steps = [
            StepRecord(index=i, actions=[a] if a else [], format_error=None if a else "x")
            for i, a in enumerate(replies)
        ]
        return score_run(Trajectory(instance_id=instance.instance_id, steps=steps), instance).looped

    assert LOOP == 3
    assert looped(edit, pytest_, pytest_, pytest_)
    assert not looped(pytest_, pytest_, edit, pytest_, pytest_)
    assert not looped(pytest_, pytest_, None, pytest_)  # a reply that did not parse between
    assert rates([]).as_dict()["looped"] == 0


def test_an_edit_tried_and_an_edit_that_went_through_are_told_apart() -> None:
    """The funnel past the right file: the held-out student tries edits whose ``old_str`` is not
    in the file (nothing changes) and creates reproduction scripts (no repository file changes);
    neither is a patch of the code, and only a changed repository file is."""
    gold = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n"
    gold += "+    return 2\n"
    instance = Instance(instance_id="a__b-1", repo="a/b", base_commit="0" * 40, patch=gold)
    missed = ActionRecord(
        tool=EDITOR,
        args={
            "command": "str_replace",
            "path": "/testbed/pkg/mod.py",
            "old_str": "return 3",
            "new_str": "return 2",
        },
        observation="No replacement was performed: old_str is not verbatim",
    )
    script = "--- /dev/null\n+++ b/repro.py\n@@ -0,0 +1 @@\n+import pkg\n"
    elsewhere = "--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -5 +5 @@\n-x = 1\n+x = 2\n"

    def score(patch: str, *actions: ActionRecord):
        steps = [StepRecord(index=i, actions=[a]) for i, a in enumerate(actions)]
        run = Trajectory(instance_id=instance.instance_id, steps=steps, patch=patch)
        return score_run(run, instance)

    tried = score(script, missed)
    assert tried.edited and not (tried.patched or tried.right_hunk)
    sed = ActionRecord(
        tool=BASH, args={"command": "cd /testbed && sed -n 1,5p x.py; sed -i 's/1/2/' pkg/other.py"}
    )
    applied = score(elsewhere + script, sed)
    assert applied.edited and applied.patched and not applied.right_hunk
    fixed = score(gold, ActionRecord(tool=BASH, args={"command": "sed -e 's/a/b/' -i pkg/mod.py"}))
    assert fixed.edited and fixed.patched and fixed.right_hunk
    printed = "def f():\n    return 1\n"
    shown = ActionRecord(tool=BASH, args={"command": "sed -n 1,9p pkg/mod.py"}, observation=printed)
    looked = score("", shown)
    assert looked.right_file and not (looked.edited or looked.patched)
    by_lines = ActionRecord(
        tool=EDITOR,
        args={
            "command": "replace_lines",
            "path": "/testbed/pkg/mod.py",
            "line_range": [2, 2],
            "new_str": "    return 2\n",
        },
    )
    lined = score(gold, by_lines)
    assert lined.edited and lined.patched and lined.right_hunk
    counts = rates([tried, applied, fixed, looked, lined]).as_dict()
    assert (counts["edited"], counts["patched"], counts["right_hunk"]) == (4, 3, 2)


GOLD = """--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,3 +10,3 @@ def first(seq):
     if not seq:
         return None
-    return seq[1]
+    return seq[0]
"""
STATEMENT = """Regression in pkg: 1 test(s) now fail

- `tests/test_mod.py::test_first`: IndexError: string index out of range

To reproduce, run this (it is `tests/test_mod.py::test_first` on its own):

```python
from pkg.mod import first


def test_first():
    assert first("A") == "A"


test_first()
```
"""


def _task() -> Instance:
    return Instance(
        instance_id="o__pkg-1",
        repo="o/pkg",
        base_commit="0" * 40,
        patch=GOLD,
        problem_statement=STATEMENT,
        synth={"operator": "off_by_one"},
    )


def _run(*actions: ActionRecord, patch: str = "") -> Trajectory:
    steps = [StepRecord(index=i, actions=[a]) for i, a in enumerate(actions)]
    return Trajectory(instance_id="o__pkg-1", steps=steps, patch=patch)


def _python(tmp_path: Path, script: str, module: str) -> str:
    """What ``python repro.py`` really prints in a checkout holding ``module`` as pkg/mod.py."""
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(module)
    (tmp_path / "repro.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "repro.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    return done.stdout + done.stderr


def test_the_right_file_means_the_gold_hunk_was_on_screen() -> None:
    """Opening a gold file is not enough (a project's usual suspects would score blind): the
    lines the gold hunk changes must have been shown; precision counts the other views."""
    task = _task()
    buggy = "\n".join(f"{n:6}\t{text}" for n, text in enumerate(["# mod"] * 9, 1))
    elsewhere = ActionRecord(
        tool=EDITOR,
        args={"command": "view", "path": "/testbed/pkg/mod.py", "view_range": [1, 9]},
        observation=buggy,
    )
    hunk = "\n".join(
        f"{n:6}\t{text}"
        for n, text in [
            (10, "    if not seq:"),
            (11, "        return None"),
            (12, "    return seq[1]"),
        ]
    )
    on_it = ActionRecord(
        tool=EDITOR,
        args={"command": "view", "path": "/testbed/pkg/mod.py", "view_range": [10, 12]},
        observation=hunk,
    )
    grep = ActionRecord(
        tool=BASH,
        args={"command": "grep -rn 'seq\\[' ."},
        observation="./pkg/mod.py:12:    return seq[1]\n",
    )
    other_file = ActionRecord(
        tool=BASH, args={"command": "cat pkg/other.py"}, observation="    return seq[1]\n"
    )
    blind = score_run(_run(elsewhere, other_file), task)
    assert not blind.right_file and (blind.views, blind.gold_views) == (2, 0)
    seen = score_run(_run(elsewhere, on_it), task)
    assert seen.right_file and (seen.views, seen.gold_views) == (2, 1)
    assert score_run(_run(grep), task).right_file
    summary = rates([blind, seen]).as_dict()
    assert summary["right_file_precision"] == 0.25 and summary["right_file_rate"] == 0.5


def test_reproduced_means_the_issues_failure_through_its_reproduction(tmp_path: Path) -> None:
    """A traceback is not enough: a garbled script's SyntaxError, or another error, does not
    count; the issue's own reproduction failing with the issue's error does."""
    task = _task()
    failure = expected_failure(STATEMENT)
    assert failure is not None and (failure.entry, failure.error) == ("test_first", "IndexError")
    script = STATEMENT.split("```python\n")[1].split("```")[0]
    buggy = "def first(seq):\n    if not seq:\n        return None\n    return seq[1]\n"

    def ran(source: str, module: str = buggy) -> bool:
        output = _python(tmp_path, source, module)
        action = ActionRecord(tool=BASH, args={"command": "python repro.py"}, observation=output)
        return score_run(_run(action), task).reproduced

    assert ran(script)
    assert not ran(script.replace("def test_first():", "def test_first()"))  # SyntaxError
    assert not ran(script, module="def first(seq):\n    raise KeyError(seq)\n")
    assert not ran(script, module=buggy.replace("seq[1]", "seq[0]"))  # fixed: no failure
    assert not ran("raise IndexError('string index out of range')\n")  # not the reproduction


def test_rates_break_down_by_project_and_operator() -> None:
    task = _task()
    other = Instance(instance_id="o__q-1", repo="o/q", base_commit="0" * 40)
    scored = [
        (task, score_run(_run(patch=GOLD).model_copy(update={"exit_status": "submitted"}), task)),
        (other, score_run(_run(), other)),
    ]
    split = breakdown(scored)
    assert set(split) == {"project", "operator"}
    assert split["project"]["o/pkg"]["submitted"] == 1 and split["project"]["o/q"]["runs"] == 1
    assert set(split["operator"]) == {"off_by_one", "unknown"}
