"""One flow per registered stage, for re-running a stage alone (its inputs come back Cached).

The flows are made from sweflow.pipeline.registry, one module-level name per stage (the
deployments' entrypoints, ``flows/stage_flows.py:<stage>``).
"""

from __future__ import annotations

from prefect import Flow, flow

from flows.runner import default_config, run_pipeline
from sweflow.pipeline.config import PipelineConfig
from sweflow.pipeline.registry import STAGES, StageSpec

DEFAULT = default_config()


def stage_flow(stage: StageSpec) -> Flow:
    """The flow that runs ``stage`` (and, from cache, what it reads from)."""

    def run(config: PipelineConfig = DEFAULT) -> dict[str, dict]:
        return run_pipeline(config, [stage.name])

    run.__name__ = run.__qualname__ = stage.name
    run.__doc__ = stage.description
    return flow(run, name=stage.flow_name, flow_run_name=f"{stage.flow_name} [{{config.name}}]")


FLOWS: dict[str, Flow] = {stage.name: stage_flow(stage) for stage in STAGES}
globals().update(FLOWS)
