"""What every stage tells the pipeline run's tracking run, whatever the stage: its counts (as
``<stage>/<count>`` metrics), its report and its table rows (artifacts). The training stages
report their settings, steps and models themselves (sweflow.training); a stage that ran from
the cache reports nothing, its figures being in the run that computed them."""

from __future__ import annotations

import json

from sweflow.pipeline.stages.common import StageContext, StageResult


def report_stage(ctx: StageContext, result: StageResult) -> dict[str, str]:
    """``result`` in the stage's tracking run; where a person finds that run, per tracker."""
    run = ctx.tracking()
    if run is None:
        return {}
    run.metrics(result.stage, result.counts, 0)
    folder = ctx.config.run_dir / "tracking" / result.stage
    folder.mkdir(parents=True, exist_ok=True)
    report, rows = folder / "report.md", folder / "rows.json"
    report.write_text(f"# {result.stage}\n\n{result.summary()}\n\n{result.markdown}\n")
    rows.write_text(json.dumps(result.rows, indent=1, default=str) + "\n")
    run.files(result.stage, [report, rows])
    return run.links()


def close_stage(ctx: StageContext) -> None:
    """The stage's part of the tracking run is over (its process lets go of W&B's run)."""
    if ctx.tracked is not None:
        ctx.tracked.close()
