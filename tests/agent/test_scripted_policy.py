"""The scripted policy, the no-model baseline of bench learn: it runs the issue's reproduction,
views the deepest traceback frame in the repository's own code, and submits; on the demo's real
sandboxes its runs are valid, its views follow the traceback, and it resolves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweflow.agent import AgentConfig
from sweflow.agent.actions import Action
from sweflow.agent.runs.scores import score_run
from sweflow.agent.teacher.clues import frames
from sweflow.agent.teacher.scripted_policy import ScriptedPolicy, scripted_clients
from sweflow.agent.tools import BASH, EDITOR, SUBMIT
from sweflow.bench.learn_runs import agent_runs
from sweflow.instances import Instance

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "tasks.jsonl"
ISSUE = "It fails:\n\n```python\nfrom pkg import f\nf()\n```\n"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "<stdin>", line 2, in <module>\n'
    '  File "/testbed/pkg/api.py", line 10, in f\n'
    '  File "/testbed/pkg/core.py", line 42, in g\n'
    '  File "/testbed/tests/helpers.py", line 3, in h\n'
    '  File "/testbed/conftest.py", line 7, in fixture\n'
    '  File "/testbed/pkg/core_test.py", line 5, in check\n'
    "ValueError: bad\n"
)


def policy(statement: str) -> ScriptedPolicy:
    row = Instance(
        instance_id="a__b-1", repo="a/b", base_commit="0" * 40, problem_statement=statement
    )
    return ScriptedPolicy(row, "text")


@pytest.mark.quick
def test_it_reproduces_views_the_deepest_own_frame_then_submits() -> None:
    scripted = policy(ISSUE)
    _, first = scripted.next_step(0, "")
    assert first.tool == BASH and "from pkg import f" in first.args["command"]
    _, second = scripted.next_step(1, TRACEBACK)
    assert second == Action(
        EDITOR, {"command": "view", "path": "/testbed/pkg/core.py", "view_range": [27, 57]}
    )
    assert scripted.next_step(2, "the view")[1].tool == SUBMIT


@pytest.mark.quick
def test_without_a_reproduction_or_a_frame_it_submits() -> None:
    assert policy("No code here.").next_step(0, "")[1].tool == SUBMIT
    assert policy(ISSUE).next_step(1, "it printed 3")[1].tool == SUBMIT


def test_on_real_sandboxes_its_views_follow_the_traceback(grading_dataset, tmp_path) -> None:
    data, store = grading_dataset(DEMO, sample=6)
    rows = data.sample(6)
    agent = AgentConfig(tool_mode="text", max_steps=5)
    runs = agent_runs(
        None, data, store, rows, tmp_path, agent, 256, client_for=scripted_clients("text")
    )
    by_id = {row.instance_id: row for row in rows}
    assert len(runs["trajectories"]) == len(rows)
    for traj in runs["trajectories"]:
        assert traj.source == "scripted" and traj.exit_status == "submitted", traj.error
        assert not traj.resolved and len(traj.steps) <= 3
        actions = [a for step in traj.steps for a in step.actions]
        views = [a for a in actions if a.tool == EDITOR]
        if views:  # the path it viewed is the deepest own frame its reproduction printed
            printed = traj.steps[0].actions[0].observation
            assert views[0].args["path"][len("/testbed/") :] in {
                f.path for f in frames(printed, "/testbed")
            }
        score_run(traj, by_id[traj.instance_id])  # every run scores
    assert runs["rates"]["valid_action_rate"] == 1.0
    by_project = runs["breakdown"]["project"]  # the rates per project and per bug operator
    assert set(by_project) == {row.repo for row in rows}
    assert sum(r["runs"] for r in by_project.values()) == len(rows)
    assert sum(r["runs"] for r in runs["breakdown"]["operator"].values()) == len(rows)
    assert "unknown" not in runs["breakdown"]["operator"]  # the demo's tasks are synthesized
