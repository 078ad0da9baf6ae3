"""``sweflow inspect`` (a run folder's runs in a browser) and ``sweflow export`` (runs in the
formats others read: SWE-agent trajectories, a SWE-bench leaderboard submission)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from sweflow.cli.common import App, console, folder_or_new, port_number, work_starts

FolderArgument = typer.Argument(
    ...,
    help="A run folder: infer, collect, an RL run's work folder, bench learn's, a pipeline's.",
    exists=True,
    file_okay=False,
)
EvalOption = typer.Option(
    [],
    "--eval",
    help="Also look for evaluation logs (logs/run_evaluation/...) under this folder "
    "(repeatable; the run folder itself is always searched).",
    exists=True,
    file_okay=False,
)


def _html_file(value: Path | None) -> Path | None:
    """--html's check before any work: an .html file in a folder sweflow may write into."""
    if value is None:
        return None
    if value.suffix.lower() not in (".html", ".htm"):
        raise typer.BadParameter(f"must name an .html file, got {value}")
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a folder; name the .html file to write")
    folder_or_new(value.parent)
    return value


def _runs(folder: Path):
    from sweflow.agent.runs.folder import find_runs

    return find_runs(folder)


def inspect_command(
    folder: Path = FolderArgument,
    html: Path | None = typer.Option(
        None,
        "--html",
        help="Write the page to this file (self-contained, opens without a server) and exit.",
        callback=_html_file,
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        help="Serve on this port of 127.0.0.1 (default: a free one).",
        callback=port_number,
    ),
    eval_roots: list[Path] = EvalOption,
) -> None:
    """Look at a folder's agent runs in a browser: a table of the runs (sorts and filters),
    each run's steps (thought, action, observation, edits as diffs), its final patch, its
    FAIL_TO_PASS / PASS_TO_PASS outcome and the tamper guard's reason where it refused, and
    two runs of a task side by side. Served on 127.0.0.1 until Ctrl-C (reload the page to see
    runs saved since), or written as one static file with --html.

    Example:
      sweflow inspect runs/infer
      sweflow inspect runs/infer --html runs/infer/inspector.html
    """
    runs = _runs(folder)  # a folder without runs is refused before anything is served
    if html is not None:
        from sweflow.inspector import write_page

        work_starts(f"write the page of {len(runs)} runs to {html}")
        shown = write_page(folder, html, eval_roots)
        console.print(f"wrote {html} ({shown} runs)", highlight=False)
        return
    from sweflow.inspector import InspectorServer, serve

    work_starts(f"serve the page of {len(runs)} runs on 127.0.0.1")
    server = InspectorServer(folder, port or 0, eval_roots)

    def ready(url: str) -> None:
        console.print(f"inspector: {url}  ({len(runs)} runs; Ctrl-C stops)", highlight=False)

    serve(server, ready)
    console.print("inspector stopped", highlight=False)


export_app = App(help="Runs in the formats others read: SWE-agent trajectories, SWE-bench.")


@export_app.command("traj")
def export_traj(
    folder: Path = FolderArgument,
    out: Path = typer.Argument(
        ..., help="Folder to write the .traj files into.", callback=folder_or_new
    ),
) -> None:
    """Write every run of a folder as a SWE-agent trajectory (<instance_id>.traj), which
    SWE-agent's inspector and the SWE-bench leaderboard's trajs/ read.

    Example:
      sweflow export traj runs/infer trajs/
    """
    from sweflow.agent.runs.swe_agent import write_trajs

    runs = _runs(folder)
    work_starts(f"write {len(runs)} SWE-agent trajectories under {out}")
    paths = write_trajs(runs, out)
    console.print(f"wrote {len(paths)} .traj files under {out}", highlight=False)


@export_app.command("submission")
def export_submission(
    folder: Path = FolderArgument,
    out: Path = typer.Argument(
        ...,
        help="The submission folder, named <YYYYMMDD>_<system> (the leaderboard's date).",
        callback=folder_or_new,
    ),
    model: str = typer.Option(..., "--model", "-m", help="model_name_or_path of the predictions."),
    name: str = typer.Option(..., "--name", help="The system's name on the leaderboard."),
    site: str = typer.Option("", "--site", help="The system's web site (info.site)."),
    report: str = typer.Option("", "--report", help="Its technical report (info.report)."),
    authors: str = typer.Option("", "--authors", help="Who made it (info.authors)."),
    org: str = typer.Option("", "--org", help="The organisation (tags.org)."),
    os_model: bool = typer.Option(False, "--os-model", help="The model's weights are open."),
    eval_roots: list[Path] = EvalOption,
) -> None:
    """Write one job's runs as a SWE-bench submission folder: all_preds.jsonl, trajs/,
    logs/<instance_id>/ (the evaluation's files) and metadata.yaml, as sb-cli and the SWE-bench
    experiments repository read them. One prediction per instance (its first run).

    Example:
      sweflow export submission runs/infer 20261125_sweflow_demo --model demo --name "sweflow demo"
    """
    from sweflow.agent.runs.submission import (
        SubmissionInfo,
        check_folder_name,
        single_source,
        write_submission,
    )
    from sweflow.grading.logs import EvaluationLogs

    check_folder_name(out)
    runs = single_source(_runs(folder))
    info = SubmissionInfo(name, model, site, report, authors, org, os_model)
    work_starts(f"write a submission of {len({t.instance_id for t in runs})} instances to {out}")
    summary = write_submission(runs, out, info, EvaluationLogs([folder, *eval_roots]))
    table = Table(title=f"submission {out}")
    for column in ("predictions", "with logs", "resolved", "attempts"):
        table.add_column(column, justify="right")
    table.add_row(
        str(summary.predictions),
        str(summary.with_logs),
        str(summary.resolved),
        str(summary.attempts),
    )
    console.print(table)
    if summary.without_logs:
        console.print(
            f"[yellow]{len(summary.without_logs)} predictions were never graded (no logs): "
            "run `sweflow eval` on the predictions and pass --eval with its folder[/]"
        )
