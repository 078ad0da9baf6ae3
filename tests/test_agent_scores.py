"""Run scores against the gold patch, on real replayed trajectories of demo tasks: the replay
teacher localises, edits inside the gold hunk, checks and submits; a run that submits at once
scores nothing but its submission."""

from __future__ import annotations

from sweflow.agent.scores import LOOP, rates, score_run
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory
from sweflow.instances import Instance


def test_replays_score_on_every_behaviour(demo_replays) -> None:
    data, out = demo_replays
    by_id = {i.instance_id: i for i in data.instances}
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
    data, _ = demo_replays
    instance = data.instances[0]
    idle = Trajectory(
        instance_id=instance.instance_id,
        exit_status="submitted",
        steps=[StepRecord(index=0), StepRecord(index=1, format_error="no block")],
    )
    score = score_run(idle, instance)
    assert (score.replies, score.valid_replies, score.submitted) == (2, 1, True)
    assert not (score.reproduced or score.right_file or score.right_hunk or score.resolved)
    assert rates([score]).as_dict()["valid_action_rate"] == 0.5


def test_a_run_loops_when_one_action_fills_three_replies_in_a_row() -> None:
    """The fine-tuned student's usual failure: the same ``pytest`` until the step limit."""
    instance = Instance(instance_id="a__b-1", repo="a/b", base_commit="0" * 40)
    pytest_ = ActionRecord(tool=BASH, args={"command": "pytest -q"})
    edit = ActionRecord(tool=EDITOR, args={"command": "str_replace", "path": "/testbed/a.py",
                                           "old_str": "a", "new_str": "b"})  # fmt: skip

    def looped(*replies: ActionRecord | None) -> bool:
        steps = [StepRecord(index=i, actions=[a] if a else [], format_error=None if a else "x")
                 for i, a in enumerate(replies)]  # fmt: skip
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
        args={"command": "str_replace", "path": "/testbed/pkg/mod.py", "old_str": "return 3",
              "new_str": "return 2"},
        observation="No replacement was performed: old_str is not verbatim",
    )  # fmt: skip
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
    looked = score("", ActionRecord(tool=BASH, args={"command": "sed -n 1,9p pkg/mod.py"}))
    assert looked.right_file and not (looked.edited or looked.patched)
    counts = rates([tried, applied, fixed, looked]).as_dict()
    assert (counts["edited"], counts["patched"], counts["right_hunk"]) == (3, 2, 1)
