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
