"""``collect_trajectories`` and ``infer``: agent runs on validated tasks with the served model."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from sweflow.agent import Batch, ModelClient, Trajectory
from sweflow.agent import jobs as agent_jobs
from sweflow.agent.jobs import JobSummary
from sweflow.agent.runner import grade_with
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.specs import load_specs
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.instances import Instance
from sweflow.pipeline.stages.common import (
    StageContext,
    StageResult,
    counter_progress,
    file_digest,
    load_tasks,
)

Job = Callable[[Batch], Awaitable[JobSummary]]


def _validated_rows(ctx: StageContext, limit: int | None) -> list[Instance]:
    rows = load_tasks(ctx.config, Path(ctx.upstream["validate_envs"]["outputs"]["dataset"]))
    return rows[:limit] if limit else rows


def _run_job(ctx: StageContext, out_dir: Path, total: int, job: Job, **options) -> JobSummary:
    """Run ``job`` on a Batch over the run's model endpoint (started on first use)."""
    config = ctx.config
    model, tool_mode = ctx.model_servers().endpoint(config.model, config.agent, config.run_dir)
    store = LayerStore(config.store())
    step = counter_progress(ctx.progress, total)

    def on_done(traj: Trajectory, resumed: bool) -> None:
        status = "resumed" if resumed else traj.exit_status
        step(f"{status}: {traj.instance_id} run {traj.run}")

    async def go() -> JobSummary:
        client = ModelClient(model)
        try:
            batch = Batch(
                client=client,
                agent=config.agent.agent_config(tool_mode),
                out_dir=out_dir,
                spec_for=lambda row: instance_sandbox_spec(store, row.instance_id),
                max_open_sandboxes=min(config.agent.concurrency, config.sandbox.max_open),
                backend=config.sandbox.backend,
                on_done=on_done,
                **options,
            )
            return await job(batch)
        finally:
            await client.close()

    return asyncio.run(go())


def _trajectory_rows(out_dir: Path) -> list[dict]:
    rows = []
    for path in sorted((out_dir / "trajectories").glob("*/run-*.json")):
        traj = Trajectory.load(path)
        rows.append(
            {
                "instance": traj.instance_id,
                "run": traj.run,
                "exit_status": traj.exit_status,
                "resolved": traj.resolved,
                "steps": len(traj.steps),
                "tokens": traj.prompt_tokens + traj.completion_tokens,
            }
        )
    return rows


def collect_trajectories(ctx: StageContext) -> StageResult:
    """K graded agent runs per validated task; the resolved ones become the SFT data."""
    config = ctx.config
    rows = _validated_rows(ctx, config.collect.limit)
    out = config.run_dir / "collect"
    grader = Grader(config.store(), load_specs(config.dataset.specs_path()),
                    backend=config.sandbox.backend, log_dir=out / "grading")  # fmt: skip
    runs = len(rows) * config.collect.rollouts
    summary = _run_job(
        ctx, out, runs, lambda batch: agent_jobs.collect(rows, batch),
        rollouts=config.collect.rollouts, grade=grade_with(grader),
    )  # fmt: skip
    sft = Path(summary.outputs["openai"])
    return StageResult(
        "collect_trajectories",
        file_digest(sft),
        summary.outputs,
        {"tasks": summary.tasks, "runs": summary.runs, "resolved": summary.resolved,
         "kept": summary.kept, "tokens": summary.prompt_tokens + summary.completion_tokens},
        _trajectory_rows(out),
    )  # fmt: skip


def infer(ctx: StageContext) -> StageResult:
    """One agent run per validated task; the diffs become preds.json."""
    config = ctx.config
    rows = _validated_rows(ctx, config.infer.limit)
    out = config.run_dir / "infer"
    name = config.model.name
    summary = _run_job(ctx, out, len(rows), lambda batch: agent_jobs.infer(rows, batch, name))
    preds = Path(summary.outputs["predictions"])
    outputs = {**summary.outputs, "dataset": ctx.upstream["validate_envs"]["outputs"]["dataset"]}
    return StageResult(
        "infer",
        file_digest(preds),
        outputs,
        {"tasks": summary.tasks, "submitted": summary.submitted, "steps": summary.steps},
        _trajectory_rows(out),
    )
