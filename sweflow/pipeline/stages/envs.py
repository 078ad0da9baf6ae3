"""``build_envs`` and ``validate_envs``: the dataset's environments, built and checked both ways."""

from __future__ import annotations

import contextlib
from collections import Counter

from sweflow.cluster.environments import (
    BuildWork,
    ValidateWork,
    build_instances,
    validate_instances,
)
from sweflow.envcache.validate import write_outputs
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    counter_progress,
    executor_markdown,
    file_digest,
    instance_step,
    json_digest,
    make_builder,
    make_executor,
)


def build_envs(ctx: StageContext) -> StageResult:
    """Build every instance's layers (cached ones are found); fails only if none built."""
    config = ctx.config
    tasks = ctx.dataset().rows
    builder = make_builder(config, ctx.dataset())
    step = counter_progress(ctx.progress, len(tasks))
    keys = [t.instance_id for t in tasks]
    with contextlib.closing(make_executor(config)) as executor:
        done = instance_step(step, executor)
        results = build_instances(
            executor,
            BuildWork(builder.specs, builder.options),
            tasks,
            on_done=lambda r: done(r.status, r.instance_id),
        )
        where = executor_markdown(executor, keys)
    counts = Counter(r.status for r in results)
    rows = [
        {"instance": r.instance_id, "status": r.status, "seconds": r.seconds, "error": r.error}
        for r in results
    ]
    if counts["error"] == len(results):
        raise StageError(f"no instance built; first error: {results[0].error}")
    manifests = {r.instance_id: r.layers for r in results if r.status != "error"}
    return StageResult(
        "build_envs",
        json_digest(manifests),
        {"store": str(config.store())},
        dict(counts),
        rows,
        where,
    )


def validate_envs(ctx: StageContext) -> StageResult:
    """Check each built instance both ways; the valid ones become the stage's dataset."""
    config = ctx.config
    tasks = ctx.dataset().rows
    builder = make_builder(config, ctx.dataset())
    out = config.run_dir / "validate"
    step = counter_progress(ctx.progress, len(tasks))
    build = BuildWork(builder.specs, builder.options)
    work = ValidateWork(build, config.envs.validate_runs, config.envs.timeout_s)
    with contextlib.closing(make_executor(config)) as executor:
        done = instance_step(step, executor)
        results = validate_instances(
            executor,
            work,
            tasks,
            out / "logs",
            on_done=lambda r: done(r.outcome, r.instance_id),
        )
        where = executor_markdown(executor, [t.instance_id for t in tasks])
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
        where,
    )
