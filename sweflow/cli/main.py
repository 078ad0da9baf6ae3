"""The ``sweflow`` command line: a thin typer layer over the library."""

from __future__ import annotations

import sys

import typer
from rich.panel import Panel
from rich.table import Table

from sweflow import __version__
from sweflow.cli.agent import collect_command, correct_command, infer_command
from sweflow.cli.bench import bench_app
from sweflow.cli.common import (
    App,
    BaseOption,
    console,
    dry_run,
    spec_from_options,
    work_starts,
)
from sweflow.cli.env import env_app
from sweflow.cli.eval import eval_command
from sweflow.cli.inspector import export_app, inspect_command
from sweflow.cli.pipeline import pipeline_app
from sweflow.cli.ray import ray_app
from sweflow.cli.sandbox import sandbox_app
from sweflow.cli.serve import model_app, serve_command
from sweflow.cli.synth import synth
from sweflow.cli.train import train_app

app = App(help="sweflow: build, validate and grade SWE environments; train and evaluate agents.")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(env_app, name="env")
app.add_typer(bench_app, name="bench")
app.add_typer(model_app, name="model")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(train_app, name="train")
app.add_typer(ray_app, name="ray")
app.add_typer(export_app, name="export")
app.command("collect")(collect_command)
app.command("infer")(infer_command)
app.command("correct")(correct_command)
app.command("serve")(serve_command)
app.command()(synth)
app.command("eval")(eval_command)
app.command("inspect")(inspect_command)


@app.callback()
def _options(
    ctx: typer.Context,
    check_only: bool = typer.Option(
        False,
        "--dry-run",
        help="Check the command's options and inputs, then stop before its work (nothing is "
        "built, opened, fetched or trained).",
    ),
) -> None:
    if check_only:
        dry_run(ctx)


@app.command()
def version() -> None:
    """Print the sweflow version.

    Example:
      sweflow version
    """
    console.print(f"sweflow {__version__}", highlight=False)


@app.command()
def demo(base: str = BaseOption) -> None:
    """A first look at the sandbox: a file written, a command run and the diff, with timings.

    (The main job on the embedded default config is `bash scripts/demo.sh`: the Prefect
    pipeline from environments to evaluation.)

    Example:
      sweflow demo --base debian:bookworm
    """
    from sweflow.sandbox.demo import run_demo

    work_starts(f"open a sandbox on {base}")
    root = spec_from_options(base, [], "/", False).layers[0]
    table = Table(title="sweflow sandbox demo")
    for column in ("step", "output", "ms"):
        table.add_column(column, overflow="fold")

    def report(step: str, output: str, seconds: float) -> None:
        table.add_row(step, output, f"{seconds * 1000:.1f}")

    patch = run_demo(root, report)
    console.print(table)
    console.print(Panel(patch or "(empty)", title="diff()", border_style="green"))


def run_script(name: str) -> None:
    """What a benchmarks/ script runs: ``sweflow bench NAME --json`` with its own arguments."""
    app(["bench", name, "--json", *sys.argv[1:]], prog_name="sweflow")
