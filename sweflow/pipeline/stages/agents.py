"""``collect_trajectories`` and ``infer``: agent runs on validated tasks with the served model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from sweflow.agent import Batch, ModelClient, Trajectory
from sweflow.agent import jobs as agent_jobs
from sweflow.agent.batch import grade_with
from sweflow.agent.config import (
    EndpointTeacher,
    ModelConfig,
    SamplingConfig,
    ServedTeacher,
    ToolMode,
)
from sweflow.agent.executor_batch import ExecutorBatch, RolloutWork, run_key
from sweflow.agent.jobs import JobSummary
from sweflow.agent.replay import replay_clients
from sweflow.agent.trajectory import load_runs
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.harness.specs import SpecTable, load_specs
from sweflow.instances import Instance
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    counter_progress,
    executor_markdown,
    file_digest,
    load_tasks,
    make_executor,
    split_tasks,
)

Job = Callable[[Batch | ExecutorBatch], Awaitable[JobSummary]]


def split_rows(ctx: StageContext, part: str, limit: int | None) -> list[Instance]:
    """The validated rows of one part of the split (train or eval), the first ``limit``."""
    validated = load_tasks(ctx.config, Path(ctx.upstream["validate_envs"]["outputs"]["dataset"]))
    rows = split_tasks(ctx.config, validated)[part]
    if not rows:
        raise StageError(f"the {part} split has no validated task; see {ctx.config.run_dir}")
    return rows[:limit] if limit else rows


def run_job(
    ctx: StageContext,
    out_dir: Path,
    total: int,
    job: Job,
    *,
    model: ModelConfig | None,
    tool_mode: ToolMode,
    grader: Grader | None = None,
    rollouts: int = 1,
    client_for: Callable | None = None,
) -> tuple[JobSummary, str]:
    """Run ``job`` on a Batch, or on an ExecutorBatch whose runs are work items on the nodes'
    stores when the executor is distributed (Ray); ``model`` is the endpoint every run shares
    (None: ``client_for`` gives each run its own client, as the replay teacher does). Returns
    the summary and, for a distributed executor, the Markdown of where the runs went."""
    config = ctx.config
    step = counter_progress(ctx.progress, total)
    agent = config.agent.agent_config(tool_mode)

    keys: list[str] = []  # every run, resumed or done now, for the node table

    def on_done(traj: Trajectory, resumed: bool) -> None:
        status = "resumed" if resumed else traj.exit_status
        step(f"{status}: {traj.instance_id} run {traj.run}")
        keys.append(run_key(traj.instance_id, traj.run))

    with contextlib.closing(make_executor(config)) as executor:
        if executor.distributed:
            work = RolloutWork(agent, config.sandbox.backend, model, client_for, grader)
            batch = ExecutorBatch(work, executor, out_dir, rollouts, on_done)
            summary = asyncio.run(job(batch))
            return summary, executor_markdown(executor, keys)

    store = LayerStore(config.store())

    async def go() -> JobSummary:
        client = ModelClient(model) if model else None
        try:
            batch = Batch(
                client=client,
                agent=agent,
                out_dir=out_dir,
                spec_for=lambda row: instance_sandbox_spec(store, row.instance_id),
                max_open_sandboxes=min(config.agent.concurrency, config.sandbox.max_open),
                backend=config.sandbox.backend,
                on_done=on_done,
                rollouts=rollouts,
                client_for=client_for,
                grade=grade_with(grader) if grader is not None else None,
            )
            return await job(batch)
        finally:
            if client is not None:
                await client.close()

    return asyncio.run(go()), ""


def _teacher_options(
    ctx: StageContext, rows: list[Instance], specs: SpecTable
) -> tuple[list[Instance], dict]:
    """The rows the collect teacher can play and the batch options that select it."""
    config, teacher = ctx.config, ctx.config.collect.teacher
    if isinstance(teacher, ServedTeacher):
        model, mode = ctx.model_servers().endpoint(config.model, config.agent, config.run_dir)
        return rows, {"model": model, "tool_mode": mode}
    # the student's tool mode, so that the trajectories are in the format it will be served in
    mode = ctx.model_servers().tool_mode(config.model, config.agent, config.run_dir)
    if isinstance(teacher, EndpointTeacher):
        sampling = config.model.model_dump(include=set(SamplingConfig.model_fields))
        model = ModelConfig(base_url=teacher.url, model=teacher.model,
                            api_key=teacher.api_key(), **sampling)  # fmt: skip
        return rows, {"model": model, "tool_mode": mode}
    client_for, skipped = replay_clients(rows, mode, specs, config.agent.max_steps)
    for instance_id, why in skipped.items():
        ctx.progress(0, len(rows), f"cannot replay {instance_id}: {why}")
    kept = [row for row in rows if row.instance_id not in skipped]
    return kept, {"model": None, "tool_mode": mode, "client_for": client_for}


TRAINING_STAGES = ("rl", "sft")  # newest first


def newest_model(upstream: dict[str, dict]) -> Path | None:
    """The model folder of the run's last training stage (RL, else SFT), None for the base."""
    for stage in TRAINING_STAGES:
        if stage in upstream:
            return Path(upstream[stage]["outputs"]["model"])
    return None


def _trajectory_rows(out_dir: Path) -> list[dict]:
    return [
        {
            "instance": traj.instance_id,
            "run": traj.run,
            "exit_status": traj.exit_status,
            "resolved": traj.resolved,
            "steps": len(traj.steps),
            "tokens": traj.prompt_tokens + traj.completion_tokens,
            "imitable": round(traj.imitable.fraction, 3) if traj.imitable else None,
        }
        for traj in load_runs(out_dir)
    ]


def collect_trajectories(ctx: StageContext) -> StageResult:
    """K graded runs of the teacher per train task; the resolved ones become the SFT data."""
    config = ctx.config
    specs = load_specs(config.dataset.specs_path())
    rows, teacher = _teacher_options(ctx, split_rows(ctx, "train", config.collect.limit), specs)
    out = config.run_dir / "collect"
    grader = Grader(config.store(), specs, backend=config.sandbox.backend,
                    log_dir=out / "grading", tamper_guard=config.collect.tamper_guard)  # fmt: skip
    runs = len(rows) * config.collect.rollouts
    summary, where = run_job(
        ctx, out, runs, lambda batch: agent_jobs.collect(rows, batch),
        rollouts=config.collect.rollouts, grader=grader, **teacher,
    )  # fmt: skip
    sft = Path(summary.outputs["openai"])
    return StageResult(
        "collect_trajectories",
        file_digest(sft),
        summary.outputs,
        {"tasks": summary.tasks, "runs": summary.runs, "submitted": summary.submitted,
         "resolved": summary.resolved,
         "kept": summary.kept, "skipped": len(summary.skipped),
         "tokens": summary.prompt_tokens + summary.completion_tokens},
        _trajectory_rows(out),
        "\n\n".join(filter(None, [where, _teacher_markdown(summary)])),
    )  # fmt: skip


def _teacher_markdown(summary: JobSummary) -> str:
    """The kept runs' imitable fraction and the tasks the teacher declined, with why."""
    lines = []
    if summary.imitable_fraction is not None:
        lines.append(
            f"Imitable fraction of the kept runs: {summary.imitable_fraction:.3f} (their "
            "actions that open, edit, run or search files resting on what they had seen)."
        )
    lines += [f"- skipped `{i}`: {why}" for i, why in summary.skipped.items()]
    return "\n".join(lines)


def infer(ctx: StageContext) -> StageResult:
    """One agent run per eval task with the run's model; the diffs become preds.json."""
    config = ctx.config
    rows = split_rows(ctx, "eval", config.infer.limit)
    out = config.run_dir / "infer"
    trained = newest_model(ctx.upstream)
    servers = ctx.model_servers()
    model, mode = servers.endpoint(config.model, config.agent, config.run_dir, trained)
    name = config.model.name
    summary, where = run_job(
        ctx, out, len(rows), lambda batch: agent_jobs.infer(rows, batch, name),
        model=model, tool_mode=mode,
    )  # fmt: skip
    preds = Path(summary.outputs["predictions"])
    outputs = {**summary.outputs, "dataset": ctx.upstream["validate_envs"]["outputs"]["dataset"]}
    return StageResult(
        "infer",
        file_digest(preds),
        outputs,
        {"tasks": summary.tasks, "submitted": summary.submitted, "steps": summary.steps},
        _trajectory_rows(out),
        "\n\n".join(filter(None, [f"Served model: `{trained or config.model.source}`.", where])),
    )
