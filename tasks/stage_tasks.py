"""One Prefect task per registered pipeline stage: cache key, retries, artifacts, logs; no logic.

A stage task's cache key is its ``inputs`` (content digests of the dataset, the config sections
it reads and its upstream outputs) plus the task's source; ``config`` itself is left out of the
key, so editing the agent section never invalidates the environment build. Results persist under
the run directory, so a second run of the same config finds every stage Cached.
"""

from __future__ import annotations

import os

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

from sweflow.errors import is_infrastructure
from sweflow.pipeline.config import PipelineConfig
from sweflow.pipeline.model_servers import ModelServers
from sweflow.pipeline.registry import STAGES, StageSpec
from sweflow.pipeline.stages.common import StageContext
from sweflow.pipeline.tracked import close_stage, report_stage
from tasks.faults import maybe_fail

SANDBOX_LIMIT = "sweflow-sandboxes"  # a global concurrency limit created by the deploy script
MODEL_SERVERS = ModelServers()  # vLLM started by the first agent stage, closed by the flow


def retry_infrastructure_only(_task, _task_run, state) -> bool:
    """Prefect's retry condition: retry failures of the machinery (a dropped connection, a
    sandbox that died, a model server that went away), never bad input, failing tests or bugs,
    which fail the same way every time (sweflow.errors.is_infrastructure)."""
    try:
        state.result()
    except BaseException as exc:
        return is_infrastructure(exc)
    return False


def _artifact_key(config: PipelineConfig, stage: str) -> str:
    return f"{config.name}-{stage}".lower().replace("_", "-")


def run_stage(stage: StageSpec, config: PipelineConfig, upstream: dict[str, dict]) -> dict:
    """Run ``stage`` with progress, table and Markdown artifacts and a sandbox concurrency slot."""
    name = stage.name
    logger = get_run_logger()
    maybe_fail(name, config.run_dir)
    progress_id = create_progress_artifact(0.0, description=f"{name}: starting")
    last = [-1.0]

    def progress(what: str, done: int = 0, total: int = 0) -> None:
        percent = round(100.0 * done / max(total, 1), 1)
        logger.info("%s [%d/%d] %s", name, done, total, what)
        if percent != last[0]:
            last[0] = percent
            update_progress_artifact(progress_id, percent, description=f"{name}: {what}")

    context = StageContext(config, upstream, progress, MODEL_SERVERS)
    slots = min(config.sandbox.max_open, config.envs.max_workers)
    try:
        with concurrency(SANDBOX_LIMIT, occupy=slots, strict=False):
            result = stage.function()(context)
        tracked = report_stage(context, result)
    finally:
        close_stage(context)
    update_progress_artifact(progress_id, 100.0, description=f"{name}: done")
    key = _artifact_key(config, name)
    if result.rows:
        create_table_artifact(result.rows, key=key, description=result.summary())
    links = "\n".join(
        [f"- **{label}**: `{os.path.abspath(path)}`" for label, path in result.outputs.items()]
        + [f"- **{tracker} run**: {link}" for tracker, link in tracked.items()]
    )
    body = f"{result.markdown}\n\n" if result.markdown else ""
    create_markdown_artifact(
        f"# {name}\n\n{result.summary()}\n\n{body}{links}\n", key=f"{key}-report"
    )
    logger.info("%s", result.summary())
    return result.to_dict()


def stage_task(stage: StageSpec):
    """The Prefect task of one stage: cached on (inputs, source), infra failures retried."""

    def body(config: PipelineConfig, inputs: dict, upstream: dict[str, dict]) -> dict:
        return run_stage(stage, config, upstream)

    body.__name__ = body.__qualname__ = f"{stage.name}_task"
    return task(
        body,
        name=stage.name,
        task_run_name=f"{stage.name} [{{config.name}}]",
        cache_policy=(INPUTS - "config" - "upstream") + TASK_SOURCE,
        persist_result=True,
        retry_delay_seconds=exponential_backoff(backoff_factor=10),
        retry_condition_fn=retry_infrastructure_only,
        tags=["sweflow", f"stage:{stage.name}"],
    )


TASKS = {stage.name: stage_task(stage) for stage in STAGES}
