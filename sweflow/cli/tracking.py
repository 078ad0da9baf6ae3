"""The tracking options the training, benchmark and pipeline commands share (``tracking_options``
and ``TrackingArgs``): MLflow, W&B and TensorBoard, several at once, checked before any work."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import typer

from sweflow.cli.common import console, option_group
from sweflow.errors import ConfigError

if TYPE_CHECKING:
    from sweflow.tracking import TrackingConfig, TrackingRun


def _tracking_uri(value: str | None) -> str | None:
    """``--mlflow``'s check before any work: a tracking URI by its shape (whether it answers is
    checked next, before the work starts too)."""
    from pydantic import ValidationError

    from sweflow.tracking.config import MLflowSettings

    if value is None:
        return None
    try:
        return MLflowSettings(tracking_uri=value).tracking_uri
    except ValidationError as exc:
        raise typer.BadParameter(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


MLflowOption = typer.Option(
    None,
    "--mlflow",
    help="Report to this MLflow tracking URI: http://HOST:PORT of a server, or a store "
    "(sqlite:///PATH.db, file:/PATH).",
    callback=_tracking_uri,
)
ExperimentOption = typer.Option(
    None,
    "--experiment",
    help="The MLflow experiment (created when missing; default sweflow).",
)
WandbOption = typer.Option(None, "--wandb", help="Report to this W&B project.")
EntityOption = typer.Option(None, "--wandb-entity", help="The W&B team or user.")
OfflineOption = typer.Option(
    False, "--wandb-offline", help="W&B writes the run folder only (upload it with `wandb sync`)."
)
NoTensorBoardOption = typer.Option(
    False, "--no-tensorboard", help="Write no TensorBoard event files."
)
RunNameOption = typer.Option(None, "--run-name", help="The tracking run's name.")


@dataclass(frozen=True)
class TrackingArgs:
    """The tracking options that ``tracking_options`` gives a command."""

    mlflow: str | None = field(metadata={"option": MLflowOption})
    experiment: str | None = field(metadata={"option": ExperimentOption})
    wandb: str | None = field(metadata={"option": WandbOption})
    wandb_entity: str | None = field(metadata={"option": EntityOption})
    wandb_offline: bool = field(metadata={"option": OfflineOption})
    no_tensorboard: bool = field(metadata={"option": NoTensorBoardOption})
    run_name: str | None = field(metadata={"option": RunNameOption})

    def section(self) -> dict[str, Any]:
        """The options given, as the keys of the ``tracking`` config section."""
        section: dict[str, Any] = {}
        if self.mlflow is not None:
            section["mlflow"] = {"tracking_uri": self.mlflow}
            if self.experiment is not None:
                section["mlflow"]["experiment"] = self.experiment
        elif self.experiment is not None:
            raise ConfigError("--experiment needs --mlflow URI")
        if self.wandb is not None:
            section["wandb"] = {"project": self.wandb, "entity": self.wandb_entity}
            if self.wandb_offline:
                section["wandb"]["mode"] = "offline"
        elif self.wandb_entity is not None or self.wandb_offline:
            raise ConfigError("--wandb-entity and --wandb-offline need --wandb PROJECT")
        if self.no_tensorboard:
            section["tensorboard"] = False
        if self.run_name is not None:
            section["run_name"] = self.run_name
        return section

    def overrides(self) -> list[str]:
        """The options given, as dotted ``tracking.KEY=VALUE`` settings of a pipeline config
        (on top of its file's, which they leave otherwise as they are)."""

        def dotted(values: dict[str, Any], prefix: str) -> list[str]:
            return [
                item
                for key, value in values.items()
                for item in (
                    dotted(value, f"{prefix}.{key}")
                    if isinstance(value, dict)
                    else [f"{prefix}.{key}={json.dumps(value)}"]
                )
            ]

        return dotted(self.section(), "tracking")

    def config(self) -> TrackingConfig:
        """The options as a checked TrackingConfig: a tracker that cannot take the run (its
        server does not answer, its client is missing) is a ConfigError naming it, before any
        work."""
        from pydantic import ValidationError

        from sweflow.configfile import describe
        from sweflow.tracking import TrackingConfig, tracking_problems

        try:
            config = TrackingConfig(**self.section())
        except ValidationError as exc:
            raise ConfigError(f"tracking options: {describe(exc)}") from None
        if problems := tracking_problems(config):
            raise ConfigError(f"tracking options: {'; '.join(problems)}")
        return config


@contextlib.contextmanager
def tracked_run(config: TrackingConfig, name: str, folder: Path) -> Iterator[TrackingRun | None]:
    """A command's tracking run (None: no tracker) for the block, named ``name`` unless
    --run-name says otherwise (sweflow.tracking.run.tracked_run); where to find it is printed
    after the block, whether it ended well or not."""
    from sweflow.tracking.run import tracked_run as run_for

    with run_for(config, name, folder) as run:
        try:
            yield run
        finally:
            for tracker, link in (run.links() if run else {}).items():
                console.print(f"{tracker} run: {link}", highlight=False)


tracking_options = option_group(TrackingArgs)


def tracking_option_table() -> tuple[tuple[str, Any, Any], ...]:
    """The options as ``sweflow bench``'s table lists a command's own (name, type, option)."""
    hints = get_type_hints(TrackingArgs)
    return tuple((f.name, hints[f.name], f.metadata["option"]) for f in fields(TrackingArgs))
