"""Where a run's parameters, per-step metrics and artifacts are reported: the ``tracking``
section of the pipeline, ``--mlflow``/``--wandb`` on the training and benchmark commands.

Any of MLflow (a tracking URI and an experiment), Weights & Biases (a project, an entity,
online or offline) and TensorBoard (the event files every trainer writes today) at once. The
settings are checked by shape here; whether the tracker answers is checked before any work
(sweflow.tracking.check). One tracking run collects every stage of one pipeline run: the flow
names it (``run_name``) and keys it (``run_key``), so that each stage finds the same run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from sweflow.configfile import ConfigModel

URI_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "databricks")
# W&B's names: letters, digits, dashes, underscores and dots (its run ids are stricter still)
WANDB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class MLflowSettings(ConfigModel):
    """An MLflow tracking server (or store) and the experiment the runs go to."""

    tracking_uri: str = Field(
        description="http(s)://HOST:PORT of a tracking server, or a store: file:/PATH, "
        "sqlite:///PATH.db, postgresql://..., databricks"
    )
    experiment: str = Field("sweflow", min_length=1, description="created when missing")

    @field_validator("tracking_uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
        if scheme not in URI_SCHEMES:
            raise ValueError(
                f"{uri!r} is no tracking URI: it starts with one of "
                f"{', '.join(s + ':' for s in URI_SCHEMES)} (a folder is file:/PATH)"
            )
        return uri.rstrip("/")

    @property
    def served(self) -> bool:
        """Whether the URI names a server (reached over HTTP) rather than a store."""
        return self.tracking_uri.lower().startswith(("http://", "https://"))


class WandbSettings(ConfigModel):
    """A Weights & Biases project; ``mode: offline`` writes the run folder only (``wandb sync``
    uploads it later)."""

    project: str = Field("sweflow", description="the W&B project")
    entity: str | None = Field(None, description="team or user; None: the account's default")
    mode: Literal["online", "offline"] = Field(
        "online", description="offline: nothing is sent; the run folder waits for `wandb sync`"
    )
    dir: Path | None = Field(None, description="where W&B writes its run folders; None: the run's")

    @field_validator("project", "entity")
    @classmethod
    def _wandb_name(cls, value: str | None) -> str | None:
        if value is not None and not WANDB_NAME.match(value):
            raise ValueError(f"{value!r}: W&B names take letters, digits, '.', '_' and '-'")
        return value


class TrackingConfig(ConfigModel):
    """Every tracker a run reports to (none, one or several)."""

    mlflow: MLflowSettings | None = Field(None, description="an MLflow tracking server or store")
    wandb: WandbSettings | None = Field(None, description="a Weights & Biases project")
    tensorboard: bool = Field(True, description="TensorBoard event files beside each trainer")
    run_name: str | None = Field(
        None, description="the tracking run's name; the pipeline's flow sets its flow run's"
    )
    run_key: str | None = Field(
        None,
        description="stages that give the same key report to the same run (the pipeline's flow "
        "sets its flow run's id); None: a new run",
    )

    @property
    def enabled(self) -> bool:
        """Whether a tracker besides TensorBoard's files is configured."""
        return self.mlflow is not None or self.wandb is not None

    def for_run(self, name: str, key: str) -> TrackingConfig:
        """This config for the run ``name`` keyed ``key`` (a name set in the config wins)."""
        return self.model_copy(update={"run_name": self.run_name or name, "run_key": key})
