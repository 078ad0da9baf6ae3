"""``build_envs`` and ``validate_envs``: the dataset's environments, built and checked both ways."""

from __future__ import annotations

from collections import Counter

from sweflow.envcache.validate import validate, write_outputs
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    counter_progress,
    file_digest,
    json_digest,
    load_tasks,
    make_builder,
)


def build_envs(ctx: StageContext) -> StageResult:
    """Build every instance's layers (cached ones are found); fails only if none built."""
    config = ctx.config
    tasks = load_tasks(config)
    builder = make_builder(config)
    step = counter_progress(ctx.progress, len(tasks))

    def on_build(instance_id: str, status: str) -> None:
        if status in ("built", "cached", "error"):
            step(f"{status}: {instance_id}")

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


def validate_envs(ctx: StageContext) -> StageResult:
    """Check each built instance both ways; the valid ones become the stage's dataset."""
    config = ctx.config
    tasks = load_tasks(config)
    builder = make_builder(config)
    built = {r.instance_id: r for r in builder.build(tasks)}  # all cached after build_envs
    prepared = [builder.prepare_validation(t, built[t.instance_id]) for t in tasks]
    out = config.run_dir / "validate"
    step = counter_progress(ctx.progress, len(prepared))
    results = validate(
        prepared,
        out / "logs",
        runs=config.envs.validate_runs,
        timeout=config.envs.timeout_s,
        max_workers=config.envs.max_workers,
        on_done=lambda result: step(f"{result.outcome}: {result.instance_id}"),
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
