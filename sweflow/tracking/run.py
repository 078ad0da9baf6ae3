"""One tracking run, reported to every configured tracker at once: what a stage logs (its
parameters, per-step metrics, sample trajectories, its model) goes to MLflow and W&B alike,
each name prefixed by the stage (``sft.learning_rate``, ``sft/loss``, ``rl/mean_reward``), so
that the stages of a pipeline run share one run without their names colliding.

The trainers' own loggers report to the same run: torchtune's (in the recipe's process),
transformers' through trl's ``report_to`` (in this process, :meth:`TrackingRun.active`) and
verl's ``trainer.logger`` (in its processes, :meth:`TrackingRun.env`).

A model folder is logged as a manifest, never copied: its path, its files and their sizes,
with its small files (config, model card, training record) beside it; W&B also gets a model
artifact that references the folder (``file://``, no checksums).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sweflow.tracking.config import TrackingConfig
from sweflow.tracking.mlflow_run import MLflowRun
from sweflow.tracking.wandb_run import WandbRun, run_id

MANIFEST = "model-manifest.json"
SMALL_BYTES = 1 << 20  # a model's files up to 1 MiB are logged (configs, card, tokenizer's)


def flat(values: Mapping[str, Any], prefix: str) -> dict[str, str]:
    """Nested settings as MLflow's flat ``a.b.c`` parameters (values as text)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name))
        else:
            out[name] = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return out


def numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The numeric figures of a record (None, text and nested values are not metrics)."""
    return {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


class TrackingRun:
    """The run ``config`` names (or ``name``), its W&B folders under ``folder`` unless the
    config says where."""

    def __init__(self, config: TrackingConfig, name: str, folder: Path) -> None:
        self.config = config
        self.name = config.run_name or name
        self.folder = folder
        self.mlflow = MLflowRun(config.mlflow, self.name, config.run_key) if config.mlflow else None
        self._wandb: WandbRun | None = None
        self.wandb_id = run_id(config.run_key) if config.run_key else None
        self.wandb_link = ""
        self.wandb()  # opened now: a tracker that fails, fails before the work

    @property
    def tensorboard(self) -> bool:
        return self.config.tensorboard

    def wandb(self) -> WandbRun | None:
        """The W&B run in this process, resumed when a stage closed it."""
        if self.config.wandb is not None and self._wandb is None:
            self._wandb = WandbRun(self.config.wandb, self.name, self.wandb_id, self.folder)
            self.wandb_id = self._wandb.id
            self.wandb_link = self._wandb.link()
        return self._wandb

    def params(self, stage: str, params: Mapping[str, Any]) -> None:
        values = flat(params, stage)
        if self.mlflow:
            self.mlflow.params(values)
        if wandb := self.wandb():
            wandb.params(values)

    def metrics(self, stage: str, metrics: Mapping[str, Any], step: int) -> None:
        values = {f"{stage}/{key}": value for key, value in numbers(metrics).items()}
        if self.mlflow:
            self.mlflow.metrics(values, step)
        if wandb := self.wandb():
            wandb.metrics(stage, values, step)

    def files(self, stage: str, paths: list[Path], folder: str = "") -> None:
        """Files or folders as artifacts under ``stage/folder``."""
        where = f"{stage}/{folder}".rstrip("/")
        for path in paths:
            if self.mlflow:
                self.mlflow.artifact(path, where)
            if wandb := self.wandb():
                wandb.artifact(path, where)

    def model(self, stage: str, model: Path, work: Path) -> Path:
        """The model folder as a manifest (written to ``work``) and its small files, plus a
        W&B reference artifact; the weights stay where they are."""
        files = sorted(p for p in model.rglob("*") if p.is_file())
        manifest = {
            "path": str(model.resolve()),
            "files": {str(p.relative_to(model)): p.stat().st_size for p in files},
            "bytes": sum(p.stat().st_size for p in files),
        }
        path = work / MANIFEST
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        small = [p for p in files if p.parent == model and p.stat().st_size <= SMALL_BYTES]
        self.files(stage, [path])
        self.files(stage, small, "model")
        if self.mlflow:
            self.mlflow.tags({f"{stage}.model": manifest["path"]})
        if wandb := self.wandb():
            wandb.reference(f"{stage}-model", model)
        return path

    def links(self) -> dict[str, str]:
        """Where a person finds the run, per tracker."""
        links = {}
        if self.mlflow:
            links["mlflow"] = self.mlflow.link()
        if self.wandb_link:
            links["wandb"] = self.wandb_link
        return links

    def env(self) -> dict[str, str]:
        """What a trainer's own process needs to report to this run."""
        env = self.mlflow.env() if self.mlflow else {}
        if wandb := self.wandb():
            env |= wandb.env()
        return env

    def wandb_arguments(self) -> dict[str, Any] | None:
        """``wandb.init``'s arguments for another process's logger (torchtune's), or None."""
        wandb = self.wandb()
        return None if wandb is None else wandb.init_arguments()

    @contextlib.contextmanager
    def detached(self) -> Iterator[None]:
        """This process lets go of the W&B run while another process (a recipe, verl) reports
        to it: two writers of one run would interleave its history."""
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None
        yield

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The run as this process's active MLflow run and current W&B run, for the loggers
        that report to those (transformers' callbacks, through trl's ``report_to``)."""
        with self.mlflow.active() if self.mlflow else contextlib.nullcontext():
            self.wandb()
            yield

    def report_to(self) -> list[str]:
        """transformers' names of the configured trackers (TensorBoard is wired separately)."""
        return [name for name in ("mlflow", "wandb") if getattr(self.config, name) is not None]

    def close(self) -> None:
        """This process's part is done (the stage's); the run goes on."""
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None

    def finish(self, failed: bool = False) -> None:
        """The run is over: finished, or failed."""
        if self.mlflow:
            self.mlflow.finish(failed)
        if wandb := self.wandb():
            wandb.finish(failed)
            self._wandb = None


def finish_run(config: TrackingConfig, failed: bool) -> dict[str, str]:
    """The end of a keyed run whose stages each closed their own part (each process's W&B
    part finished with it): MLflow's run is marked finished, or failed. Where to find it."""
    links = {}
    if config.mlflow is not None:
        mlflow = MLflowRun(config.mlflow, config.run_name or "sweflow", config.run_key)
        mlflow.finish(failed)
        links["mlflow"] = mlflow.link()
    if config.wandb is not None and config.run_key:
        where = f"{config.wandb.entity}/" if config.wandb.entity else ""
        links["wandb"] = f"run {run_id(config.run_key)} of {where}{config.wandb.project}"
    return links


@contextlib.contextmanager
def tracked_run(
    config: TrackingConfig | None, name: str, folder: Path
) -> Iterator[TrackingRun | None]:
    """The tracking run ``config`` asks for (None: none) for the block of work it follows:
    finished after it, or failed when it raises (Ctrl-C included)."""
    run = open_tracking(config, name, folder)
    if run is None:
        yield None
        return
    failed = True
    try:
        yield run
        failed = False
    finally:
        run.finish(failed)


def open_tracking(config: TrackingConfig | None, name: str, folder: Path) -> TrackingRun | None:
    """The run ``config`` asks for, or None when it asks for nothing but today's TensorBoard
    files (a run with no tracker still carries ``tensorboard: false`` to the trainers)."""
    if config is None or (not config.enabled and config.tensorboard):
        return None
    return TrackingRun(config, name, folder)
