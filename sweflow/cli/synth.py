"""``sweflow synth``: make SWE-bench-format tasks by injecting bugs into real repositories."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sweflow.cli.common import (
    ExecutorOption,
    WheelhouseOption,
    cli_executor,
    console,
    folder_or_new,
    positive,
    work_starts,
)

OPERATORS_HELP = "Bug operators (repeatable); default: all (an unknown name lists them)."


def synth(
    source: list[str] = typer.Option(
        [], "--source", help="pypi:NAME==VERSION or a local git repository (repeatable)."
    ),
    config: Path = typer.Option(None, "--config", "-c", help="A synth recipe (YAML)."),
    out: Path = typer.Option(None, "--out", "-o", help="Dataset JSONL to write."),
    operators: list[str] = typer.Option(
        None,
        "--operators",
        help=OPERATORS_HELP,
    ),
    max_tasks: int = typer.Option(None, "--max-tasks", "-n", help="Valid tasks per source."),
    max_candidates: int = typer.Option(None, "--max-candidates", help="Candidates per source."),
    seed: int = typer.Option(None, "--seed", help="Seed of the candidate order."),
    work: Path = typer.Option(
        None,
        "--work",
        help="Work folder (repos, layer store, logs); default beside --out.",
        callback=folder_or_new,
    ),
    wheelhouse: Path = WheelhouseOption,
    max_workers: int = typer.Option(
        None, "--max-workers", "-j", help="Sandboxes at once.", callback=positive
    ),
    final_check: bool = typer.Option(
        None, "--final-check/--no-final-check", help="Build and validate the emitted tasks."
    ),
    executor_name: str | None = ExecutorOption,
) -> None:
    """Synthesize validated tasks (bug + hidden failing tests + fix) from real repositories.

    Examples:
      sweflow synth --config configs/synth-demo.yaml
      sweflow synth --source pypi:toolz==1.0.0 --out data/toolz/tasks.jsonl -n 5 --executor ray:auto
    """
    from sweflow.configfile import validate_model
    from sweflow.synth.config import SynthConfig, SynthConfigError, load_config
    from sweflow.synth.synthesize import SUMMARY_COLUMNS, Synthesizer, operator_summary

    overrides = dict(
        out=out,
        operators=operators or None,
        max_tasks=max_tasks,
        max_candidates=max_candidates,
        seed=seed,
        max_workers=max_workers,
        final_check=final_check,
    )
    if source:
        overrides["sources"] = [{"source": s} for s in source]
    if config is not None:
        cfg = load_config(config, **overrides)
    else:
        if not source or out is None:
            raise typer.BadParameter("give --source and --out, or a --config recipe")
        given = {k: v for k, v in overrides.items() if v is not None}
        cfg = validate_model(SynthConfig, given, "synth options", SynthConfigError)
    work_dir = work or cfg.out.parent / ".synth-work"
    work_starts(f"synthesize from {len(cfg.sources)} source(s) into {cfg.out}")
    executor = cli_executor(executor_name, work_dir / "store")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("starting", total=None)

        def update(what: str, done: int = 0, total: int = 0) -> None:
            progress.update(bar, description=what, completed=done, total=total)

        synthesizer = Synthesizer(
            cfg, work_dir, wheelhouse=wheelhouse, progress=update, executor=executor
        )
        instances, reports = synthesizer.run()
    table = Table(title=f"sweflow synth: {len(instances)} tasks -> {cfg.out}")
    table.add_column("operator")
    for column in SUMMARY_COLUMNS:
        table.add_column(column.replace("_", " "), justify="right")
    summary = operator_summary(reports)
    for operator, row in summary.items():
        table.add_row(operator, *(str(row[c]) for c in SUMMARY_COLUMNS))
    table.add_row(
        "[bold]total", *(str(sum(r[c] for r in summary.values())) for c in SUMMARY_COLUMNS)
    )
    console.print(table)
    for report in reports:
        console.print(
            f"{report.source}: {len(report.tasks)} tasks, {report.clean_tests} clean tests, "
            f"{report.candidates} sites, {report.seconds:.0f} s",
            highlight=False,
        )
        for rejected in report.rejected_by_final_check:
            console.print(f"  [yellow]rejected by the final check:[/] {rejected}", highlight=False)
