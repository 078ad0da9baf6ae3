"""The saved runs of any run folder, wherever a job put them.

``infer`` and ``collect`` (and the pipeline's agent stages, the replay teacher, bench learn's
held-out runs) save ``<out>/trajectories/<task>/run-<k>.json``; RL saves each step's episodes as
``<work>/rollouts/step-<NNNN>/<i>-<task>.json`` (redrawn groups under ``redrawn/``, see
sweflow.training.rl.episode.save_episodes). A pipeline run, a ``bench learn`` folder or a
single job's folder hold any number of these, nested: each run is found with the folder it
came from (``source``, relative to the folder given) and, for an RL episode, its step.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sweflow.agent.trajectory import Trajectory, load_run
from sweflow.errors import ConfigError

RUN_FILE = re.compile(r"run-(\d+)\.json")
EPISODE_FILE = re.compile(r"(\d+)-(.+)\.json")
STEP_FOLDER = re.compile(r"step-(\d+)")
POLICY_NAME = re.compile(r"policy@(\d+)$")  # what an RL episode's model is called
# Folders that hold no runs and may be large: models, checkpoints, layer stores, graded logs.
SKIPPED = frozenset({".git", "checkpoints", "model", "models", "layers", "logs", "grading"})


class NoRuns(ConfigError):
    """A folder that holds no saved run (a pipeline whose agent stages did not run)."""


@dataclass(frozen=True)
class FoundRun:
    """A saved run and where it came from."""

    path: Path
    source: str  # the folder of the job that saved it, relative to the folder searched
    trajectory: Trajectory
    rl_step: int | None = None  # the RL step whose episode it was
    redrawn: bool = False  # an RL group drawn again (dynamic sampling), not trained on first

    @property
    def policy_version(self) -> int | None:
        """The updates the policy that generated it had had (RL episodes only)."""
        found = POLICY_NAME.search(self.trajectory.model)
        return int(found.group(1)) if found else None


def find_runs(folder: Path) -> list[FoundRun]:
    """Every saved run under ``folder``, sorted by source, task and run. A folder that is not
    there raises a ConfigError, one without runs NoRuns saying what was looked for, and a file
    in a run's place that is not a run a ConfigError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder")
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED)
        here = Path(dirpath)
        for name in sorted(filenames):
            if (run := _classify(here / name, folder)) is not None:
                found.append(run)
    if not found:
        raise NoRuns(
            f"{folder}: no saved runs (looked for trajectories/<task>/run-<k>.json of infer, "
            "collect or bench learn, and rollouts/step-<n>/<i>-<task>.json of RL)"
        )
    return sorted(found, key=lambda r: (r.source, r.trajectory.instance_id, r.trajectory.run))


def _classify(path: Path, root: Path) -> FoundRun | None:
    """The run ``path`` holds when its place says it is one, else None."""
    parent = path.parent
    if RUN_FILE.fullmatch(path.name) and parent.parent.name == "trajectories":
        job = parent.parent.parent
        return FoundRun(path, _relative(job, root), load_run(path))
    if not EPISODE_FILE.fullmatch(path.name):
        return None
    redrawn = parent.name == "redrawn"
    step_dir = parent.parent if redrawn else parent
    step = STEP_FOLDER.fullmatch(step_dir.name)
    if step is None or step_dir.parent.name != "rollouts":
        return None
    return FoundRun(
        path, _relative(step_dir, root), load_run(path), rl_step=int(step.group(1)), redrawn=redrawn
    )


def _relative(path: Path, root: Path) -> str:
    relative = path.relative_to(root).as_posix()
    return "." if relative in ("", ".") else relative
