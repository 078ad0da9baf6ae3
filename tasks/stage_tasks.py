"""One Prefect task per pipeline stage: cache key, retries, artifacts and logs; no logic.

A stage task's cache key is its ``inputs`` (content digests of the dataset, the config section
it reads and its upstream outputs) plus the task's source; ``config`` itself is left out of the
key, so editing the agent section never invalidates the environment build. Results persist under
the run directory, so a second run of the same config finds every stage Cached.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.concurrency.sync import concurrency
from prefect.tasks import exponential_backoff

from sweflow.pipeline import stages
from sweflow.pipeline.config import PipelineConfig, Stage
from sweflow.pipeline.model import ModelServers
from sweflow.sandbox import SandboxError
from tasks.faults import InjectedFault, maybe_fail

SANDBOX_LIMIT = "sweflow-sandboxes"  # a global concurrency limit created by the deploy script
StageFn = Callable[..., stages.StageResult]


# Failures of the machinery, worth another try: a dropped connection, a killed sandbox or
# process, a model server that went away. Bad input (other SweflowErrors), failing tests and
# bugs (TypeError...) fail the same way every time: they are not retried.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError, BrokenPipeError, a vanished file handle
    TimeoutError,
    SandboxError,
    InjectedFault,
)


def retry_infrastructure_only(_task, _task_run, state) -> bool:
    """Prefect's retry condition: retry only INFRASTRUCTURE_ERRORS."""
    try:
        state.result()
    except INFRASTRUCTURE_ERRORS:
        return True
    except BaseException:
        return False
    return False


def _artifact_key(config: PipelineConfig, stage: str) -> str:
    return f"{config.name}-{stage}".lower().replace("_", "-")


def run_stage(stage: Stage, fn: StageFn, config: PipelineConfig, *upstream: dict) -> dict:
    """Run ``fn`` with progress, table and Markdown artifacts and a sandbox concurrency slot."""
    logger = get_run_logger()
    maybe_fail(stage, config.run_dir)
    progress_id = create_progress_artifact(0.0, description=f"{stage}: starting")
    last = [-1.0]

    def progress(done: int, total: int, what: str) -> None:
        percent = round(100.0 * done / max(total, 1), 1)
        logger.info("%s [%d/%d] %s", stage, done, total, what)
        if percent != last[0]:
            last[0] = percent
            update_progress_artifact(progress_id, percent, description=f"{stage}: {what}")

    slots = min(config.sandbox.max_open, config.envs.max_workers)
    with concurrency(SANDBOX_LIMIT, occupy=slots, strict=False):
        result = fn(config, *upstream, progress=progress)
    update_progress_artifact(progress_id, 100.0, description=f"{stage}: done")
    key = _artifact_key(config, stage)
    if result.rows:
        create_table_artifact(result.rows, key=key, description=f"{stage}: {result.counts}")
    links = "\n".join(
        f"- **{name}**: `{os.path.abspath(path)}`" for name, path in result.outputs.items()
    )
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(result.counts.items()))
    create_markdown_artifact(f"# {stage}\n\n{counts}\n\n{links}\n", key=f"{key}-report")
    logger.info("%s done: %s", stage, counts)
    return result.to_dict()


def stage_task(stage: Stage, fn: StageFn):
    """The Prefect task of one stage: cached on (inputs, source), infra failures retried."""

    def body(config: PipelineConfig, inputs: dict, *upstream: dict) -> dict:
        return run_stage(stage, fn, config, *upstream)

    body.__name__ = body.__qualname__ = f"{stage}_task"
    return task(
        body,
        name=stage,
        task_run_name=f"{stage} [{{config.name}}]",
        cache_policy=(INPUTS - "config" - "upstream") + TASK_SOURCE,
        persist_result=True,
        retry_delay_seconds=exponential_backoff(backoff_factor=10),
        retry_condition_fn=retry_infrastructure_only,
        tags=["sweflow", f"stage:{stage}"],
    )


MODEL_SERVERS = ModelServers()  # vLLM started by the first agent stage, closed by the flow


def _with_models(fn: StageFn) -> StageFn:
    def run(config: PipelineConfig, *upstream: dict, progress) -> stages.StageResult:
        return fn(config, *upstream, progress=progress, models=MODEL_SERVERS)

    return run


TASKS = {
    "build_envs": stage_task("build_envs", stages.build_envs),
    "validate_envs": stage_task("validate_envs", stages.validate_envs),
    "collect_trajectories": stage_task(
        "collect_trajectories", _with_models(stages.collect_trajectories)
    ),
    "infer": stage_task("infer", _with_models(stages.infer)),
    "evaluate": stage_task("evaluate", stages.evaluate),
}
