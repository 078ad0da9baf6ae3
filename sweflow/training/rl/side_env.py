"""An outside trainer's own environment (verl's .venv-verl, SkyRL's .venv-skyrl) and the
processes sweflow starts in it: its interpreter, a logged run that fails naming its log, and the
launch.sh a user can re-run by hand.

Their pins clash with Prefect's (and SkyRL wants another Python), so each lives in a venv beside
.venv, made by its setup script, or where an environment variable names its interpreter.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.errors import ConfigError, SweflowError

if TYPE_CHECKING:
    from sweflow.tracking import TrackingRun

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class SideEnv:
    """A trainer's environment: ``.venv-<name>`` from ``scripts/setup-<name>.sh``, or the
    interpreter ``variable`` names."""

    name: str  # the venv's suffix and the setup script's
    variable: str  # names another interpreter
    purpose: str  # what needs it, for the error

    def python_path(self) -> Path:
        """Where the interpreter is (or would be)."""
        named = os.environ.get(self.variable)
        return Path(named) if named else ROOT / f".venv-{self.name}" / "bin" / "python"

    def ready(self) -> bool:
        """Whether the environment is installed: the interpreter a variable names, or the venv
        with its setup script's stamp (written last: a venv still installing has none)."""
        python = self.python_path()
        if os.environ.get(self.variable):
            return python.is_file()
        return (python.parents[1] / f".sweflow-{self.name}-installed").is_file()

    def python(self) -> Path:
        """The interpreter; a ConfigError naming the setup script when it is missing."""
        python = self.python_path()
        if not python.is_file():
            raise ConfigError(
                f"{self.purpose} needs its environment: {python} does not exist (run "
                f"`bash scripts/setup-{self.name}.sh`, or set {self.variable})"
            )
        return python


def run_logged(
    argv: list[str],
    log: Path,
    failure: str,
    error: type[SweflowError],
    env: dict[str, str] | None = None,
) -> None:
    """Run ``argv`` from the repository root with its output in ``log``; when it fails, ``error``
    saying ``failure`` (what failed), the exit status and the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False
        )
    if done.returncode != 0:
        tail = log.read_text()[-2000:]
        raise error(f"{failure} (exit {done.returncode}); see {log}:\n{tail}")


def compose_logged(
    argv: list[str], log: Path, trainer: str, section: str, error: type[SweflowError]
) -> None:
    """Run a trainer's compose step ``argv`` (its own Hydra and checks, in its environment):
    the last ``error: ...`` line it wrote, its one-line refusal, becomes a ConfigError naming
    ``section``; any other failure is ``error`` with the log's tail."""
    try:
        run_logged(argv, log, f"{trainer} failed composing its config", error)
    except error:
        refused = [line for line in log.read_text().splitlines() if line.startswith("error: ")]
        if refused:
            raise ConfigError(
                f"{section}: {trainer} refused its config: {refused[-1][7:]}"
            ) from None
        raise


def tracked_checkpoint(checkpoints: Path, tracker: str) -> Path | None:
    """The ``global_step_N`` checkpoint that a trainer's tracker file (holding N) names as its
    last, or None."""
    named = checkpoints / tracker
    return checkpoints / f"global_step_{named.read_text().strip()}" if named.is_file() else None


def launch_script(command: list[str], exports: dict[str, str], title: str) -> str:
    """launch.sh: ``command`` with the environment it is started with, for a user to re-run."""
    lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in exports.items())
    return f"#!/usr/bin/env bash\n# {title}\n{lines}exec {shlex.join(command)}\n"


def trainer_loggers(
    tracking: TrackingRun | None, experiment: str, own: list[str]
) -> tuple[list[str], str, str]:
    """An outside trainer's loggers: its console, TensorBoard unless the tracking turns it off,
    ``own`` (where sweflow reads it back), and the run's MLflow and W&B; with the project name
    (W&B's) and the experiment's name (the tracking run's, else ``experiment``)."""
    loggers, project = ["console"], "sweflow"
    if tracking is None or tracking.tensorboard:
        loggers.append("tensorboard")
    loggers += own
    if tracking is not None:
        loggers += tracking.report_to()
        experiment = tracking.name
        if tracking.config.wandb is not None:
            project = tracking.config.wandb.project
    return loggers, project, experiment
