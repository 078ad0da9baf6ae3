"""The whole pipeline as one flow: every stage of ``config.stages`` (and what they read from)."""

from __future__ import annotations

from prefect import flow

from flows.pipeline import default_config, run_pipeline
from sweflow.pipeline.config import PipelineConfig


@flow(name="end-to-end", flow_run_name="end-to-end [{config.name}]", log_prints=True)
def end_to_end(config: PipelineConfig = default_config()) -> dict[str, dict]:  # noqa: B008
    """build_envs -> validate_envs -> collect_trajectories -> infer -> evaluate."""
    return run_pipeline(config, list(config.stages))


if __name__ == "__main__":
    end_to_end()
