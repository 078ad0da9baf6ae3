"""``sweflow pipeline``: the pipeline's config as it will run, and its stages."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from sweflow.cli.common import App, console
from sweflow.cli.tracking import TrackingArgs, tracking_options
from sweflow.paths import CHECKOUT

pipeline_app = App(help="The Prefect pipeline's config and stages (runs go through Prefect).")

# the arguments every command here reads a config by
CONFIG = typer.Argument(
    CHECKOUT / "configs" / "demo.yaml",
    help="A pipeline config (YAML); default: the demo config of this checkout.",
    show_default=False,
)
OVERRIDES = typer.Argument(
    None, help="Settings by dotted name, e.g. agent.max_steps=12 model.temperature=0.7."
)
ROOT = typer.Option(
    CHECKOUT,
    "--root",
    help="Where the pipeline runs: its relative paths are checked there; default: this "
    "checkout, where the bundled deployments run.",
    show_default=False,
)


@pipeline_app.command("config")
@tracking_options
def pipeline_config(
    config: Path = CONFIG,
    overrides: list[str] = OVERRIDES,
    json_out: bool = typer.Option(False, "--json", help="As the JSON `--params` of a deployment."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Also read the config's datasets as the run will (from disk or the Hugging Face "
        "cache, never the network): rows, formats, images and recipes; a Hub id not in the "
        "cache is named as what the run would download.",
    ),
    root: Path = ROOT,
    *,
    tracking: TrackingArgs,
) -> None:
    """Validate a config with its overrides and print it whole, defaults filled in. The
    tracking options set its tracking section (a tracker that does not answer is refused).

    Examples:
      sweflow pipeline config configs/demo.yaml agent.max_steps=12
      sweflow pipeline config configs/r2egym-agentsandbox.yaml --check
      prefect deployment run end-to-end/demo --params "$(sweflow pipeline config --json)"
      sweflow pipeline config --mlflow sqlite:///runs/mlflow.db --wandb swe-agents --wandb-offline
    """
    from sweflow.pipeline.config import load_pipeline_config

    checked = load_pipeline_config(config, [*(overrides or []), *tracking.overrides()], root=root)
    if check:
        _print_data_check(checked, root)
        return
    loaded = checked.model_dump(mode="json")
    if json_out:
        sys.stdout.write(json.dumps({"config": loaded}) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(loaded, sort_keys=False, width=100))


def _print_data_check(config, root: Path) -> None:
    from sweflow.pipeline.datacheck import check_data

    table = Table(title=f"data of pipeline config {config.name}")
    for column in ("field", "source", "rows", "formats", "with image", "with recipe", "skipped"):
        table.add_column(column, overflow="fold")
    notes = []
    for c in check_data(config, root):
        counts = (
            ("-",) * 5
            if c.rows is None
            else (c.rows, c.formats, c.with_image, c.with_recipe, c.skipped)
        )
        table.add_row(*(Text(str(cell)) for cell in (c.field, c.source, *counts)))
        if c.note:
            notes.append(f"{c.field}: {c.note}")
    console.print(table)
    for note in notes:
        console.print(Text(note))  # plain text: ":train" is no emoji code


@pipeline_app.command("plan")
def pipeline_plan(
    config: Path = CONFIG,
    overrides: list[str] = OVERRIDES,
    root: Path = ROOT,
) -> None:
    """What each stage of a config would start, with nothing started: torchtune's command and
    recipe, verl's config (composed by verl where .venv-verl exists) and launch.sh, vLLM's
    command. A model not here yet is named by its Hub id; nothing is downloaded.

    Examples:
      sweflow pipeline plan configs/r2egym-agentsandbox.yaml
      sweflow pipeline plan configs/swesmith-minisandbox.yaml model.tensor_parallel_size=8
    """
    import tempfile

    from rich.syntax import Syntax

    from sweflow.pipeline.config import load_pipeline_config
    from sweflow.pipeline.plan import plan

    checked = load_pipeline_config(config, overrides or [], root=root)
    with tempfile.TemporaryDirectory() as scratch, console.status("planning the stages"):
        stages = plan(checked, compose_in=Path(scratch))
    for stage in stages:
        console.rule(f"[bold]{stage.stage}")
        console.print(Text(stage.summary))
        for shown in stage.shown:
            console.print(Text(f"{shown.title}:", style="dim"))
            console.print(Syntax(shown.text, shown.language, theme="ansi_dark", word_wrap=True))


@pipeline_app.command("stages")
def pipeline_stages() -> None:
    """The registered stages in pipeline order: what each reads and runs.

    Example:
      sweflow pipeline stages
    """
    from sweflow.pipeline.registry import STAGES

    table = Table(title="pipeline stages")
    table.add_column("stage", no_wrap=True)
    table.add_column("after", no_wrap=True)
    table.add_column("what it does (config sections it reads)")
    for stage in STAGES:
        sections = ", ".join(stage.sections)
        what = f"{stage.description} [dim]({sections})[/]"
        table.add_row(stage.name, ", ".join(stage.upstream) or "-", what)
    console.print(table)
