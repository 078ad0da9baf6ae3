"""``sweflow eval``: grade predictions like ``python -m swebench.harness.run_evaluation``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from sweflow.cli.common import (
    BackendOption,
    ExecutorOption,
    cli_executor,
    console,
    folder_or_new,
    path_name,
    positive,
    progress_bar,
    work_starts,
)
from sweflow.cli.datasets import (
    DatasetArgs,
    dataset_options,
    print_retries,
)

STYLES = {"resolved": "green", "unresolved": "yellow", "error": "red", "empty": "dim"}


@dataset_options
def eval_command(
    data: DatasetArgs,
    predictions: str = typer.Option(
        ..., "--predictions", "-p", help="preds.json, preds.jsonl, or 'gold'."
    ),
    run_id: str = typer.Option(
        ..., "--run-id", help="Names the run (a folder); a re-run resumes it.", callback=path_name
    ),
    backend: str = BackendOption,
    max_workers: int = typer.Option(
        2, "--max-workers", "-j", help="Instances graded at once.", callback=positive
    ),
    report_dir: Path = typer.Option(
        Path("."),
        "--report-dir",
        help="Where <model>.<run_id>.json/.md go.",
        callback=folder_or_new,
    ),
    timeout: float = typer.Option(
        1800.0, "--timeout", help="Seconds per eval script.", callback=positive
    ),
    tamper_guard: bool = typer.Option(
        False,
        "--tamper-guard",
        help="Refuse patches that pass tests without fixing anything (they edit tests or test "
        "settings, hide paths from the diff, reach into the test runner, or end the run early): "
        "unresolved, with the reason in report.json. Off by default, as in the official harness.",
    ),
    executor_name: str | None = ExecutorOption,
) -> None:
    """Build what is missing, grade each prediction in a fresh sandbox, write swebench's files.

    Examples:
      sweflow eval -d data/demo --store store/ -p gold --run-id gold
      sweflow eval -d data/demo/tasks.jsonl --store store/ -p preds.json --run-id r1 -b docker
      sweflow eval -d data/demo --store store/ -p preds.json --run-id r2 --tamper-guard
      sweflow eval -d data/demo --store store/ -p gold --run-id gold --executor ray:127.0.0.1:6379
    """
    from sweflow.grading.evaluate import evaluate
    from sweflow.grading.predictions import load_predictions
    from sweflow.grading.reward import Grader

    dataset = data.load()
    rows = dataset.rows
    preds = load_predictions(predictions, rows)
    err = Console(stderr=True)
    for error in preds.errors:
        err.print(f"[yellow]skipped prediction:[/] {error}", highlight=False)
    wanted = {p.instance_id for p in preds.items}
    rows_to_build = [r for r in rows if r.instance_id in wanted]
    work_starts(f"grade {len(preds.items)} prediction(s) as run {run_id} on {backend}")
    executor = cli_executor(executor_name, data.store)
    data.build_with_progress(dataset, rows_to_build, executor)
    grader = Grader(
        data.store,
        dataset.specs,
        backend=backend,
        timeout_s=timeout,
        tamper_guard=tamper_guard,
    )
    with progress_bar() as bar:
        task = bar.add_task("grading", total=len(preds.items))
        summary = evaluate(
            grader,
            rows,
            preds.items,
            run_id,
            report_dir=report_dir,
            dataset_name=data.dataset,
            max_workers=max_workers,
            on_done=lambda o: bar.update(
                task, advance=1, description=f"{o.status}: {o.instance_id}"
            ),
            executor=executor,
            build=data.build_work(dataset),
        )
    print_retries(executor)
    table = Table(title=f"sweflow eval {run_id}")
    for column in ("instance", "model", "status", "F2P", "P2P", "seconds", "reason"):
        table.add_column(column, overflow="fold")
    for o in sorted(summary.outcomes, key=lambda o: o.instance_id):
        r = o.result
        status = "resolved" if o.status == "cached" and o.resolved else o.status
        style = STYLES.get(status, "")
        table.add_row(
            o.instance_id,
            o.model,
            f"[{style}]{o.status}[/]" if style else o.status,
            f"{r.f2p_passed}/{r.f2p_total}" if r else "",
            f"{r.p2p_passed}/{r.p2p_total}" if r else "",
            f"{r.duration_s:.2f}" if r else "",
            o.reason[:160],
        )
    console.print(table)
    rep = summary.report
    console.print(
        f"resolved {rep['resolved_instances']}/{rep['total_instances']}  "
        f"(unresolved {rep['unresolved_instances']}, empty {rep['empty_patch_instances']}, "
        f"error {rep['error_instances']})   report: {summary.report_path}   "
        f"summary: {summary.markdown_path}",
        highlight=False,
    )
