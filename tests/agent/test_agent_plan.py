"""A batch of runs said once (sweflow.agent.runs.plan.RunPlan): a plan that cannot work is refused
when it is made, naming what is wrong, before any sandbox opens or any model is called."""

from __future__ import annotations

import pytest

from sweflow.agent import AgentConfig, ModelConfig, RunPlan
from sweflow.errors import ConfigError


def test_a_plan_has_one_model_for_every_run_or_a_client_per_run(tmp_path) -> None:
    model = ModelConfig(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(ConfigError, match="one model for every run or a client per run"):
        RunPlan(AgentConfig(), tmp_path, tmp_path, model=model, client_for=lambda row: None)


@pytest.mark.parametrize("bound", ["rollouts", "max_open_sandboxes", "max_grading"])
def test_a_plan_without_room_for_a_run_is_refused(tmp_path, bound) -> None:
    with pytest.raises(ConfigError, match=f"{bound} is 0, at least 1"):
        RunPlan(AgentConfig(), tmp_path, tmp_path, **{bound: 0})
