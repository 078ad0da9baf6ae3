"""A pipeline config is checked when it is loaded and when a flow starts, naming each field:
before, a `dataset.path` that did not exist, a `run_dir` that was a file and an unknown
`model.source` were accepted and failed later, the file `run_dir` retried twice as a failure of
the machinery (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweflow.pipeline.config import PipelineConfigError, load_pipeline_config

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "configs" / "demo.yaml"
BAD = ["dataset.path=nope/tasks.jsonl", "run_dir={file}", "model.source=no-such-model"]


def _bad_overrides(tmp_path: Path) -> list[str]:
    afile = tmp_path / "a-file"
    afile.write_text("")
    return [o.replace("{file}", str(afile)) for o in BAD]


def test_a_config_that_cannot_work_is_refused_at_load_naming_each_field(tmp_path) -> None:
    with pytest.raises(PipelineConfigError) as refused:
        load_pipeline_config(DEMO_CONFIG, _bad_overrides(tmp_path), root=REPO)
    said = str(refused.value)
    assert "dataset.path: nope/tasks.jsonl does not exist" in said
    assert "run_dir: " in said and "is a file, not a folder" in said
    assert "model.source: model 'no-such-model' is not" in said
    assert load_pipeline_config(DEMO_CONFIG, root=REPO).name == "demo"  # the good one loads


def test_relative_paths_are_checked_where_the_pipeline_runs(tmp_path) -> None:
    """The demo config's paths are relative to the checkout, where the deployments run."""
    with pytest.raises(PipelineConfigError, match="relative to " + str(tmp_path)):
        load_pipeline_config(DEMO_CONFIG, root=tmp_path)


def test_a_bad_config_fails_the_flow_before_any_task_and_is_never_retried(tmp_path) -> None:
    """A form's values reach the flow checked by type only: the flow checks them before the
    first task, and Prefect's retry condition never retries a config error."""
    pytest.importorskip("prefect")
    from prefect.states import Failed

    from flows.runner import default_config, run_pipeline
    from tasks.stage_tasks import retry_infrastructure_only

    afile = tmp_path / "a-file"
    afile.write_text("")
    config = default_config().model_copy(update={"run_dir": afile})
    with pytest.raises(PipelineConfigError, match="run_dir: .* is a file") as refused:
        run_pipeline(config, ["build_envs"])  # raises before Prefect is reached
    assert not retry_infrastructure_only(None, None, Failed(data=refused.value))
    assert retry_infrastructure_only(None, None, Failed(data=NotADirectoryError(20, "x")))


@pytest.mark.parametrize(
    "override, said",
    [
        ("sft.learning_rate=inf", "sft.learning_rate: Input should be a finite number"),
        ("sft.learning_rate=.nan", "sft.learning_rate: Input should be a finite number"),
        ("model.temperature=-1", "model.temperature: Input should be greater than or equal to 0"),
        ("sandbox.max_open=true", "sandbox.max_open: Value error, expected a number, not true"),
        ("agent.max_steps=false", "agent.max_steps: Value error, expected a number, not true"),
        ("name=../../x", "name: Value error, '../../x' contains '/'"),
        ("run_dir=/etc", "run_dir: /etc is a folder of the system"),
        ("run_dir=/", "run_dir: / is a folder of the system"),
        ("envs.store=/usr/lib/store", "envs.store: /usr/lib/store is a folder of the system"),
    ],
)
def test_values_that_are_no_setting_are_refused_naming_the_field(override: str, said: str):
    """Each was accepted (issue 54): ``learning_rate: inf`` printed as JSON's invalid
    ``Infinity``, ``max_open: true`` became 1, ``name: ../../x`` and ``run_dir: /etc`` were
    taken as they were."""
    with pytest.raises(PipelineConfigError) as refused:
        load_pipeline_config(DEMO_CONFIG, [override], root=REPO)
    assert said in str(refused.value) and "\n" not in str(refused.value)
