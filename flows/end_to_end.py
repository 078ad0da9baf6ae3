"""The whole pipeline as one flow: every stage of ``config.stages`` (and what they read from)."""

from __future__ import annotations

from prefect import flow

from flows.runner import default_config, run_pipeline
from sweflow.pipeline.config import PipelineConfig
from sweflow.pipeline.registry import STAGES


@flow(
    name="end-to-end",
    flow_run_name="end-to-end [{config.name}]",
    description=" -> ".join(stage.name for stage in STAGES),
    log_prints=True,
)
def end_to_end(config: PipelineConfig = default_config()) -> dict[str, dict]:  # noqa: B008
    """Every stage the config asks for, in pipeline order, each one cached task."""
    return run_pipeline(config, list(config.stages))


if __name__ == "__main__":
    end_to_end()
