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
