"""One flow per stage, for re-running a stage alone (its inputs come back Cached)."""

from __future__ import annotations

from prefect import flow

from flows.pipeline import default_config, run_pipeline
from sweflow.pipeline.config import PipelineConfig

DEFAULT = default_config()


@flow(name="build-envs", flow_run_name="build-envs [{config.name}]")
def build_envs(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
    """Build (or find cached) every instance's layers."""
    return run_pipeline(config, ["build_envs"])


@flow(name="validate-envs", flow_run_name="validate-envs [{config.name}]")
def validate_envs(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
    """Validate every built instance both ways; writes the validated dataset."""
    return run_pipeline(config, ["validate_envs"])


@flow(name="collect-trajectories", flow_run_name="collect-trajectories [{config.name}]")
def collect_trajectories(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
    """Graded agent runs on validated tasks; the resolved ones become SFT data."""
    return run_pipeline(config, ["collect_trajectories"])


@flow(name="infer", flow_run_name="infer [{config.name}]")
def infer(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
    """One agent run per task with the configured model; writes preds.json."""
    return run_pipeline(config, ["infer"])


@flow(name="evaluate", flow_run_name="evaluate [{config.name}]")
def evaluate(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
    """Grade preds.json like swebench's run_evaluation (same files, same summary)."""
    return run_pipeline(config, ["evaluate"])
