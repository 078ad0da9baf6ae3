"""One Weights & Biases run, online or offline (``mode: offline`` writes only the run folder:
nothing leaves the machine until ``wandb sync``).

A run keyed by ``run_key`` has an id made from the key, and every process that reports to it
(this one, torchtune's recipe, verl's trainer) resumes that id. Offline, each process writes
its own folder ``offline-run-<time>-<id>``; ``wandb sync --id <id>`` uploads them in order.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweflow.tracking.config import WandbSettings


def run_id(key: str) -> str:
    """The W&B run id of a run key (W&B ids take no '/', ':' or '#'; keys may)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class WandbRun:
    """The run ``name`` in the settings' project, writing under ``folder`` unless the settings
    name a ``dir``."""

    def __init__(self, settings: WandbSettings, name: str, run: str | None, folder: Path) -> None:
        import wandb

        self.settings = settings
        self.name = name
        self.dir = (settings.dir or folder).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.id = run
        self.run = wandb.init(**self.init_arguments(), reinit="finish_previous")
        self.id = self.run.id
        self.stages: set[str] = set()

    def init_arguments(self) -> dict[str, Any]:
        """``wandb.init``'s arguments for this run, in any process (torchtune's WandBLogger
        passes them on): the same id, resumed."""
        arguments = {
            "project": self.settings.project,
            "entity": self.settings.entity,
            "name": self.name,
            "mode": self.settings.mode,
            "dir": str(self.dir),
            "resume": "allow",
            "save_code": False,
        }
        return arguments if self.id is None else {**arguments, "id": self.id}

    def params(self, params: Mapping[str, str]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def tags(self, tags: Mapping[str, str]) -> None:
        self.run.config.update(dict(tags), allow_val_change=True)

    def metrics(self, stage: str, metrics: Mapping[str, float], step: int) -> None:
        """``stage``'s figures against its own step axis (W&B's step only grows, and each
        stage counts its steps from 1)."""
        if stage not in self.stages:
            self.run.define_metric(f"{stage}/step")
            self.run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
            self.stages.add(stage)
        self.run.log({**metrics, f"{stage}/step": step})

    def artifact(self, path: Path, folder: str) -> None:
        """A copy in the run's files (uploaded with the run; offline, kept in its folder)."""
        target = Path(self.run.dir) / folder / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            shutil.copy2(path, target)

    def reference(self, name: str, folder: Path) -> None:
        """A model artifact that points at ``folder`` (no copy, no checksums of its weights)."""
        import wandb

        artifact = wandb.Artifact(name, type="model", metadata={"path": str(folder)})
        artifact.add_reference(folder.resolve().as_uri(), checksum=False)
        self.run.log_artifact(artifact)

    def link(self) -> str:
        if self.settings.mode == "offline":
            folders = f"{self.dir}/wandb/offline-run-*-{self.id}"
            return f"{folders} (offline: upload with `wandb sync --id {self.id} {folders}`)"
        return self.run.url or self.id

    def env(self) -> dict[str, str]:
        """What a trainer's process needs to resume this run (verl's W&B logger reads them)."""
        env = {
            "WANDB_RUN_ID": self.id,
            "WANDB_RESUME": "allow",
            "WANDB_PROJECT": self.settings.project,
            "WANDB_MODE": self.settings.mode,
            "WANDB_DIR": str(self.dir),
        }
        if self.settings.entity:
            env["WANDB_ENTITY"] = self.settings.entity
        return env

    def close(self) -> None:
        """Done in this process (the run goes on in the next stage's)."""
        self.run.finish()

    def finish(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)
