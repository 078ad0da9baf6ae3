"""``sweflow pipeline``: the pipeline's config as it will run, and its stages."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from sweflow.cli.common import App, console
from sweflow.paths import CHECKOUT

pipeline_app = App(help="The Prefect pipeline's config and stages (runs go through Prefect).")


@pipeline_app.command("config")
def pipeline_config(
    config: Path = typer.Argument(
        CHECKOUT / "configs" / "demo.yaml",
        help="A pipeline config (YAML); default: the demo config of this checkout.",
        show_default=False,
    ),
    overrides: list[str] = typer.Argument(
        None, help="Settings by dotted name, e.g. agent.max_steps=12 model.temperature=0.7."
    ),
    json_out: bool = typer.Option(False, "--json", help="As the JSON `--params` of a deployment."),
    root: Path = typer.Option(
        CHECKOUT,
        "--root",
        help="Where the pipeline runs: its relative paths are checked there; default: this "
        "checkout, where the bundled deployments run.",
        show_default=False,
    ),
) -> None:
    """Validate a config with its overrides and print it whole, defaults filled in.

    Examples:
      sweflow pipeline config configs/demo.yaml agent.max_steps=12
      prefect deployment run end-to-end/demo --params "$(sweflow pipeline config --json)"
    """
    from sweflow.pipeline.config import load_pipeline_config

    loaded = load_pipeline_config(config, overrides or [], root=root).model_dump(mode="json")
    if json_out:
        sys.stdout.write(json.dumps({"config": loaded}) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(loaded, sort_keys=False, width=100))


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
