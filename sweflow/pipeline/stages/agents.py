"""``collect_trajectories`` and ``infer``: agent runs on validated tasks with the served model."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable
from pathlib import Path

from sweflow.agent.config import (
    EndpointTeacher,
    ModelConfig,
    SamplingConfig,
    ServedTeacher,
    ToolMode,
)
from sweflow.agent.runs import jobs as agent_jobs
from sweflow.agent.runs.batch import Batch
from sweflow.agent.runs.executor_batch import ExecutorBatch, run_key
from sweflow.agent.runs.jobs import JobSummary
from sweflow.agent.runs.passk import report_markdown
from sweflow.agent.runs.plan import ClientFor, Job, RunPlan, run_plan
from sweflow.agent.runs.samples import Sampling, check_saved
from sweflow.agent.runs.selectors import SelectorContext
from sweflow.agent.runs.tts import Selection, load_report
from sweflow.agent.teacher.replay import replay_clients
from sweflow.agent.trajectory import Trajectory, load_runs
from sweflow.errors import ConfigError
from sweflow.grading import Grader
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.pipeline.stages.common import (
    TRAINING_STAGES,
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


def split_rows(ctx: StageContext, part: str, limit: int | None) -> list[Instance]:
    """The validated rows of one part of the split (train or eval), the first ``limit``."""
    validated = load_tasks(ctx.config, Path(ctx.upstream["validate_envs"]["outputs"]["dataset"]))
    rows = split_tasks(ctx.config, validated)[part]
    if not rows:
        raise StageError(f"the {part} split has no validated task; see {ctx.config.run_dir}")
    return rows[:limit] if limit else rows


def stage_plan(
    ctx: StageContext,
    out_dir: Path,
    tool_mode: ToolMode,
    *,
    model: ModelConfig | None = None,
    client_for: ClientFor | None = None,
    grader: Grader | None = None,
    rollouts: int = 1,
) -> RunPlan:
    """The plan of a stage's agent runs: the config's agent, store, backend and bounds, with the
    stage's model (or a client per run: the replay teacher), grader and rollouts."""
    config = ctx.config
    return RunPlan(
        agent=config.agent.agent_config(tool_mode),
        out_dir=out_dir,
        store=config.store(),
        backend=config.sandbox.backend,
        model=model,
        client_for=client_for,
        grader=grader,
        rollouts=rollouts,
        max_open_sandboxes=min(config.agent.concurrency, config.sandbox.max_open),
    )


def run_job(ctx: StageContext, plan: RunPlan, total: int, job: Job) -> tuple[JobSummary, str]:
    """Run ``job`` on the plan's runs (work items on the nodes' stores when the executor is
    distributed, Ray); returns the summary and, for a distributed executor, the Markdown of
    where the runs went."""
    step = counter_progress(ctx.progress, total)
    keys: list[str] = []  # every run, resumed or done now, for the node table

    def on_done(traj: Trajectory, resumed: bool) -> None:
        status = "resumed" if resumed else traj.exit_status
        step(f"{status}: {traj.instance_id} run {traj.run}")
        keys.append(run_key(traj.instance_id, traj.run))

    with contextlib.closing(make_executor(ctx.config)) as executor:
        summary = asyncio.run(run_plan(plan, job, executor=executor, on_done=on_done))
        return summary, executor_markdown(executor, keys) if executor.distributed else ""


def _collect_plan(
    ctx: StageContext, rows: list[Instance], specs: SpecTable, out: Path
) -> tuple[list[Instance], RunPlan]:
    """The rows the collect teacher can play and the plan of its graded runs."""
    config, teacher = ctx.config, ctx.config.collect.teacher
    grader = Grader(
        config.store(),
        specs,
        backend=config.sandbox.backend,
        log_dir=out / "grading",
        tamper_guard=config.collect.tamper_guard,
    )
    plan = functools.partial(stage_plan, ctx, out, grader=grader, rollouts=config.collect.rollouts)
    if isinstance(teacher, ServedTeacher):
        model, mode = ctx.model_servers().endpoint(config.model, config.agent, config.run_dir)
        return rows, plan(mode, model=model)
    # the student's tool mode, so that the trajectories are in the format it will be served in
    mode = ctx.model_servers().tool_mode(config.model, config.agent, config.run_dir)
    if isinstance(teacher, EndpointTeacher):
        sampling = config.model.model_dump(include=set(SamplingConfig.model_fields))
        key = teacher.api_key()
        model = ModelConfig(base_url=teacher.url, model=teacher.model, api_key=key, **sampling)
        return rows, plan(mode, model=model)
    client_for, skipped = replay_clients(rows, mode, specs, config.agent.max_steps, teacher.edits)
    for instance_id, why in skipped.items():
        ctx.progress(f"cannot replay {instance_id}: {why}", 0, len(rows))
    kept = [row for row in rows if row.instance_id not in skipped]
    return kept, plan(mode, client_for=client_for)


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
    specs = ctx.dataset().specs
    out = config.run_dir / "collect"
    train = split_rows(ctx, "train", config.collect.limit)
    rows, plan = _collect_plan(ctx, train, specs, out)
    runs = len(rows) * config.collect.rollouts
    summary, where = run_job(ctx, plan, runs, lambda batch: agent_jobs.collect(rows, batch))
    sft = Path(summary.outputs["openai"])
    return StageResult(
        "collect_trajectories",
        file_digest(sft),
        summary.outputs,
        {
            "tasks": summary.tasks,
            "runs": summary.runs,
            "submitted": summary.submitted,
            "resolved": summary.resolved,
            "kept": summary.kept,
            "skipped": len(summary.skipped),
            "tokens": summary.prompt_tokens + summary.completion_tokens,
        },
        _trajectory_rows(out),
        "\n\n".join(filter(None, [where, _teacher_markdown(summary)])),
    )


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
    """The eval tasks' runs with the run's model (N graded samples each when ``infer.samples``
    is above 1, a selector's picks the predictions); the diffs become preds.json."""
    config = ctx.config
    rows = split_rows(ctx, "eval", config.infer.limit)
    out = config.run_dir / "infer"
    trained = newest_model(ctx.upstream)
    servers = ctx.model_servers()
    model, mode = servers.endpoint(config.model, config.agent, config.run_dir, trained)
    name = config.model.name
    plan, selection = _infer_plan(ctx, out, mode, model)

    def job(batch: Batch | ExecutorBatch) -> Awaitable[JobSummary]:
        return agent_jobs.infer(rows, batch, name, selection, progress=ctx.progress)

    summary, where = run_job(ctx, plan, len(rows) * plan.rollouts, job)
    preds = Path(summary.outputs["predictions"])
    outputs = {**summary.outputs, "dataset": ctx.upstream["validate_envs"]["outputs"]["dataset"]}
    counts = {"tasks": summary.tasks, "submitted": summary.submitted, "steps": summary.steps}
    notes = [f"Served model: `{trained or config.model.source}`.", where]
    if "samples" in summary.outputs:
        report = load_report(Path(summary.outputs["samples"]))
        counts.update(samples=report.graded, resolved_samples=report.resolved_samples)
        notes.append(f"Predictions: the `{config.infer.predict}` selector's picks.")
        notes.append(report_markdown(report))
    return StageResult(
        "infer",
        file_digest(preds),
        outputs,
        counts,
        _trajectory_rows(out),
        "\n\n".join(filter(None, notes)),
    )


def _infer_plan(
    ctx: StageContext, out: Path, mode: ToolMode, model: ModelConfig
) -> tuple[RunPlan, Selection | None]:
    """The infer stage's plan: one run per task, or ``infer.samples`` graded samples drawn at
    ``infer.temperature`` with their own seeds, and the selection among them."""
    config, section = ctx.config, ctx.config.infer
    if section.samples == 1:
        return stage_plan(ctx, out, mode, model=model), None
    sampling = Sampling(temperature=section.temperature, seed=section.seed)
    try:
        check_saved(out, sampling)
    except ConfigError as exc:
        raise StageError(f"{exc} (or remove {out / 'trajectories'} to draw them again)") from None
    specs = ctx.dataset().specs
    grader = Grader(
        config.store(),
        specs,
        backend=config.sandbox.backend,
        log_dir=out / "grading",
        tamper_guard=section.tamper_guard,
    )
    plan = stage_plan(ctx, out, mode, model=model, grader=grader, rollouts=section.samples)
    context = SelectorContext(
        store=config.store(), backend=config.sandbox.backend, specs=specs, verifier=model
    )
    selection = Selection(list(section.selectors), section.predict, context)
    return dataclasses.replace(plan, sampling=sampling), selection
