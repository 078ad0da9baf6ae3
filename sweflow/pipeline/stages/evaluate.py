"""``evaluate``: preds.json graded the way swebench's run_evaluation does, same files."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from sweflow.agent.runs.passk import report_markdown
from sweflow.agent.runs.tts import load_report
from sweflow.cluster.environments import BuildWork
from sweflow.grading import Grader
from sweflow.grading.evaluate import RunSummary
from sweflow.grading.evaluate import evaluate as run_evaluation
from sweflow.grading.predictions import load_predictions
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    counter_progress,
    executor_markdown,
    file_digest,
    instance_step,
    load_tasks,
    make_builder,
    make_executor,
)


def evaluate(ctx: StageContext) -> StageResult:
    """Grade preds.json the way swebench's run_evaluation does, with its files and summary."""
    config, inferred = ctx.config, ctx.upstream["infer"]
    instances = load_tasks(config, Path(inferred["outputs"]["dataset"]))
    predictions = load_predictions(Path(inferred["outputs"]["predictions"]), instances)
    if predictions.errors:
        raise StageError("bad predictions: " + "; ".join(predictions.errors))
    out = config.run_dir / "eval"
    grader = Grader(
        config.store(),
        ctx.dataset().specs,
        backend=config.sandbox.backend,
        timeout_s=config.eval.timeout_s,
        tamper_guard=config.eval.tamper_guard,
    )
    step = counter_progress(ctx.progress, len(predictions.items))
    builder = make_builder(config, ctx.dataset())
    with contextlib.closing(make_executor(config)) as executor:
        done = instance_step(step, executor)
        summary = run_evaluation(
            grader,
            instances,
            predictions.items,
            config.eval.run_id,
            root=out,
            report_dir=out,
            dataset_name=str(config.dataset.path),
            max_workers=config.eval.max_workers,
            on_done=lambda o: done(o.status, o.instance_id),
            executor=executor,
            build=BuildWork(builder.specs, builder.options),
        )
        where = executor_markdown(executor, [p.instance_id for p in predictions.items])
    counts = {k: v for k, v in summary.report.items() if isinstance(v, int)}
    rows = [
        {"instance": o.instance_id, "status": o.status, "resolved": o.resolved, "reason": o.reason}
        for o in summary.outcomes
    ]
    outputs = {
        "report": str(summary.report_path),
        "summary": str(summary.markdown_path),
        "logs": str(out / "logs" / "run_evaluation" / config.eval.run_id),
    }
    notes = [where]
    if samples := inferred["outputs"].get("samples"):
        path, markdown = samples_beside(Path(samples), summary)
        outputs["samples"] = str(path)
        notes.append(markdown)
    return StageResult(
        "evaluate",
        file_digest(summary.report_path),
        outputs,
        counts,
        rows,
        "\n\n".join(filter(None, notes)),
    )


def samples_beside(samples: Path, summary: RunSummary) -> tuple[Path, str]:
    """The infer stage's samples report (pass@k, best-of-n, oracle pass@N) beside swebench's
    report, as ``<model>.<run_id>.samples.json``, with this evaluation's verdict on the
    predictions (a selector's picks) added; and its Markdown."""
    report = load_report(samples)
    predict = report.predict
    resolved = sum(o.resolved for o in summary.outcomes)
    evaluated = {"selector": predict, "resolved": resolved, "tasks": len(summary.outcomes)}
    path = summary.report_path.with_suffix(".samples.json")
    data = {**report.model_dump(mode="json"), "evaluated": evaluated}
    path.write_text(json.dumps(data, indent=1) + "\n")
    line = (
        f"The predictions (the `{predict}` selector's picks) graded here: {resolved} of "
        f"{len(summary.outcomes)} resolved."
    )
    return path, f"{report_markdown(report)}\n{line}"
