"""The pipeline's stages as plain functions: config + upstream outputs in, files and a summary out.

Prefect wraps these (tasks/), but nothing here knows about it: a stage can be run and tested on
its own. Each returns a :class:`StageResult` whose ``digest`` is a content digest of what it
wrote, so that a later stage's cache key changes exactly when its inputs do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sweflow.agent import AgentConfig, AgentLimits, Batch, ModelClient, Trajectory
from sweflow.agent import stages as agent_stages
from sweflow.agent.runner import grade_with
from sweflow.agent.stages import StageSummary
from sweflow.envcache.builder import BuildOptions, EnvBuilder, instance_sandbox_spec
from sweflow.envcache.specs import load_specs
from sweflow.envcache.store import LayerStore
from sweflow.envcache.validate import validate, write_outputs
from sweflow.errors import SweflowError
from sweflow.grading import Grader
from sweflow.grading.evaluate import evaluate as run_evaluation
from sweflow.grading.predictions import load_predictions
from sweflow.instances import Instance, load_instances
from sweflow.pipeline.config import SECTIONS, PipelineConfig, Stage
from sweflow.pipeline.model import ModelServers

Progress = Callable[[int, int, str], None]  # (done, total, what)


class StageError(SweflowError):
    """A stage that cannot produce its outputs for a reason retrying will not change."""


@dataclass
class StageResult:
    stage: str
    digest: str  # of the outputs, for downstream cache keys
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path
    counts: dict[str, int] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # one table row per instance/run

    def to_dict(self) -> dict:
        return asdict(self)


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (a stage's cache key must see contents, not just a path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def json_digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stage_inputs(config: PipelineConfig, stage: Stage, upstream: list[dict]) -> dict:
    """What a stage's result depends on: its config sections, upstream digests, the data, code.

    Paths are keyed by content (a file path as an input would ignore its contents), and the
    library's stage code is part of the key, so an edited stage is never served from cache.
    """
    inputs: dict = {
        "sections": {
            name: getattr(config, name).model_dump(mode="json") for name in SECTIONS[stage]
        },
        "upstream": [u["digest"] for u in upstream],
        "code": file_digest(Path(__file__)),
    }
    if stage in ("build_envs", "validate_envs"):
        inputs["dataset"] = file_digest(config.dataset.path)
        inputs["specs"] = file_digest(config.dataset.specs_path())
    return inputs


def load_tasks(config: PipelineConfig, path: Path | None = None) -> list[Instance]:
    """The dataset (or an earlier stage's output), narrowed by ``instances`` and ``limit``."""
    section = config.dataset
    result = load_instances(path or section.path, instances=section.instances)
    instances = result.raise_for_errors()
    return instances[: section.limit] if section.limit else instances


def make_builder(config: PipelineConfig) -> EnvBuilder:
    envs = config.envs
    options = BuildOptions(
        store=config.store(),
        repo_mirror=config.dataset.mirror(),
        wheelhouse=envs.wheelhouse,
        max_workers=envs.max_workers,
        timeout_s=envs.timeout_s,
    )
    return EnvBuilder(load_specs(config.dataset.specs_path()), options)


def build_envs(config: PipelineConfig, progress: Progress | None = None) -> StageResult:
    """Build every instance's layers (cached ones are found); fails only if none built."""
    tasks = load_tasks(config)
    builder = make_builder(config)
    finished = Counter()

    def on_build(instance_id: str, status: str) -> None:
        if progress is not None and status in ("built", "cached", "error"):
            finished["n"] += 1
            progress(finished["n"], len(tasks), f"{status}: {instance_id}")

    builder.progress = on_build
    results = builder.build(tasks)
    counts = Counter(r.status for r in results)
    rows = [
        {"instance": r.instance_id, "status": r.status, "seconds": r.seconds, "error": r.error}
        for r in results
    ]
    if counts["error"] == len(results):
        raise StageError(f"no instance built; first error: {results[0].error}")
    manifests = {
        t.instance_id: [layer.digest for layer in m.layers]
        for t in tasks
        if (m := builder.store.read_manifest(t.instance_id)) is not None
    }
    return StageResult(
        "build_envs",
        json_digest(manifests),
        {"store": str(config.store())},
        dict(counts),
        rows,
    )


def validate_envs(
    config: PipelineConfig, _built: dict | None = None, progress: Progress | None = None
) -> StageResult:
    """Check each built instance both ways; the valid ones become the stage's dataset."""
    tasks = load_tasks(config)
    builder = make_builder(config)
    built = {r.instance_id: r for r in builder.build(tasks)}  # all cached after build_envs
    prepared = [builder.prepare_validation(t, built[t.instance_id]) for t in tasks]
    out = config.run_dir / "validate"
    done = Counter()

    def on_done(result) -> None:
        done["n"] += 1
        if progress is not None:
            progress(done["n"], len(prepared), f"{result.outcome}: {result.instance_id}")

    results = validate(
        prepared,
        out / "logs",
        runs=config.envs.validate_runs,
        timeout=config.envs.timeout_s,
        max_workers=config.envs.max_workers,
        on_done=on_done,
    )
    dataset = out / "validated.jsonl"
    write_outputs(results, tasks, dataset, out)
    counts = Counter(r.outcome for r in results)
    if not counts["valid"]:
        raise StageError(f"no instance is valid; see {out / 'validation.md'}")
    rows = [{"instance": r.instance_id, "outcome": r.outcome, "reason": r.reason} for r in results]
    return StageResult(
        "validate_envs",
        file_digest(dataset),
        {"dataset": str(dataset), "report": str(out / "validation.md")},
        dict(counts),
        rows,
    )


def _stage_rows(config: PipelineConfig, upstream: dict, limit: int | None) -> list[Instance]:
    rows = load_tasks(config, Path(upstream["outputs"]["dataset"]))
    return rows[:limit] if limit else rows


def _agent_batch(
    config: PipelineConfig,
    models: ModelServers,
    out_dir: Path,
    progress: Progress | None,
    total: int,
    **options,
) -> tuple[Callable[[Callable[[Batch], Awaitable[StageSummary]]], StageSummary], str]:
    """A runner of one agent stage on a Batch, and the model name it talks to."""
    model, tool_mode = models.endpoint(config.model, config.agent, config.run_dir)
    agent = AgentConfig(
        tool_mode=tool_mode,
        limits=AgentLimits(max_steps=config.agent.step_limit, max_wall_s=config.agent.wall_time_s),
    )
    store = LayerStore(config.store())
    done = Counter()

    def on_done(traj: Trajectory, resumed: bool) -> None:
        done["n"] += 1
        if progress is not None:
            status = "resumed" if resumed else traj.exit_status
            progress(done["n"], total, f"{status}: {traj.instance_id} run {traj.run}")

    def run(stage: Callable[[Batch], Awaitable[StageSummary]]) -> StageSummary:
        async def go() -> StageSummary:
            client = ModelClient(model)
            try:
                batch = Batch(
                    client=client,
                    agent=agent,
                    out_dir=out_dir,
                    spec_for=lambda row: instance_sandbox_spec(store, row.instance_id),
                    max_open_sandboxes=min(config.agent.concurrency, config.sandbox.max_open),
                    backend=config.sandbox.backend,
                    on_done=on_done,
                    **options,
                )
                return await stage(batch)
            finally:
                await client.close()

        return asyncio.run(go())

    return run, model.model


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


def collect_trajectories(
    config: PipelineConfig,
    validated: dict,
    progress: Progress | None = None,
    models: ModelServers | None = None,
) -> StageResult:
    """K graded agent runs per validated task; the resolved ones become the SFT data."""
    rows = _stage_rows(config, validated, config.collect.limit)
    out = config.run_dir / "collect"
    grader = Grader(config.store(), load_specs(config.dataset.specs_path()),
                    backend=config.sandbox.backend, log_dir=out / "grading")  # fmt: skip

    run, _ = _agent_batch(
        config, models or ModelServers(), out, progress, len(rows) * config.collect.rollouts,
        rollouts=config.collect.rollouts, grade=grade_with(grader),
    )  # fmt: skip
    summary = run(lambda batch: agent_stages.collect(rows, batch))
    sft = Path(summary.outputs["openai"])
    return StageResult(
        "collect_trajectories",
        file_digest(sft),
        summary.outputs,
        {"tasks": summary.tasks, "runs": summary.runs, "resolved": summary.resolved,
         "kept": summary.kept, "tokens": summary.prompt_tokens + summary.completion_tokens},
        _trajectory_rows(out),
    )  # fmt: skip


def infer(
    config: PipelineConfig,
    validated: dict,
    progress: Progress | None = None,
    models: ModelServers | None = None,
) -> StageResult:
    """One agent run per validated task; the diffs become preds.json."""
    rows = _stage_rows(config, validated, config.infer.limit)
    out = config.run_dir / "infer"
    run, model_name = _agent_batch(config, models or ModelServers(), out, progress, len(rows))
    summary = run(lambda batch: agent_stages.infer(rows, batch, model_name))
    preds = Path(summary.outputs["predictions"])
    outputs = {**summary.outputs, "dataset": validated["outputs"]["dataset"]}
    return StageResult(
        "infer",
        file_digest(preds),
        outputs,
        {"tasks": summary.tasks, "submitted": summary.submitted, "steps": summary.steps},
        _trajectory_rows(out),
    )


def evaluate(
    config: PipelineConfig, inferred: dict, progress: Progress | None = None
) -> StageResult:
    """Grade preds.json the way swebench's run_evaluation does, with its files and summary."""
    instances = load_tasks(config, Path(inferred["outputs"]["dataset"]))
    predictions = load_predictions(Path(inferred["outputs"]["predictions"]), instances)
    if predictions.errors:
        raise StageError("bad predictions: " + "; ".join(predictions.errors))
    out = config.run_dir / "eval"
    grader = Grader(config.store(), load_specs(config.dataset.specs_path()),
                    backend=config.sandbox.backend, timeout_s=config.eval.timeout_s)  # fmt: skip
    finished = Counter()

    def on_done(outcome) -> None:
        finished["n"] += 1
        if progress is not None:
            progress(finished["n"], len(predictions.items),
                     f"{outcome.status}: {outcome.instance_id}")  # fmt: skip

    summary = run_evaluation(
        grader,
        instances,
        predictions.items,
        config.eval.run_id,
        root=out,
        report_dir=out,
        dataset_name=str(config.dataset.path),
        max_workers=config.eval.max_workers,
        on_done=on_done,
    )
    counts = {k: v for k, v in summary.report.items() if isinstance(v, int)}
    rows = [{"instance": o.instance_id, "status": o.status, "resolved": o.resolved,
             "reason": o.reason} for o in summary.outcomes]  # fmt: skip
    return StageResult(
        "evaluate",
        file_digest(summary.report_path),
        {"report": str(summary.report_path), "summary": str(summary.markdown_path),
         "logs": str(out / "logs" / "run_evaluation" / config.eval.run_id)},
        counts,
        rows,
    )  # fmt: skip
