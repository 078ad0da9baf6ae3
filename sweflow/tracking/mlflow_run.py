"""One MLflow run, reached through MLflow's own client (``MlflowClient``, no global state: the
trainers in this process and their subprocesses attach to the same run by its id).

A run keyed by ``run_key`` is found again by its tag, so every stage of a pipeline run (each
perhaps in another process, retried or resumed) reports to one MLflow run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from sweflow.tracking.config import MLflowSettings

KEY_TAG = "sweflow.run_key"
BATCH = 100  # MLflow's limit of params (and tags) in one call


class MLflowRun:
    """The run ``name`` (found by ``key`` when given) in the settings' experiment."""

    def __init__(self, settings: MLflowSettings, name: str, key: str | None) -> None:
        from mlflow.tracking import MlflowClient

        from sweflow.tracking.check import store_folder

        self.settings = settings
        if (folder := store_folder(settings.tracking_uri)) is not None:
            folder.mkdir(parents=True, exist_ok=True)  # SQLite makes its file, not its folder
        self.client = MlflowClient(settings.tracking_uri)
        found = self.client.get_experiment_by_name(settings.experiment)
        self.experiment_id = (
            found.experiment_id if found else self.client.create_experiment(settings.experiment)
        )
        self.run_id = (
            self._find(key)
            or self.client.create_run(
                self.experiment_id, run_name=name, tags={KEY_TAG: key} if key else None
            ).info.run_id
        )
        self.client.update_run(self.run_id, status="RUNNING")

    def _find(self, key: str | None) -> str | None:
        if key is None:
            return None
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1
        )
        return runs[0].info.run_id if runs else None

    def params(self, params: Mapping[str, str]) -> None:
        """Logged once per run: logging a name again with another value is refused by MLflow."""
        from mlflow.entities import Param

        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + BATCH])

    def tags(self, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, value)

    def metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, value, now, step) for key, value in metrics.items()]
        if items:
            self.client.log_batch(self.run_id, metrics=items)

    def artifact(self, path: Path, folder: str) -> None:
        """A file or a folder, under ``folder`` of the run's artifacts."""
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), folder)
        else:
            self.client.log_artifact(self.run_id, str(path), folder)

    def link(self) -> str:
        """Where a person sees the run: its page on the server, or the store and the run id."""
        if self.settings.served:
            page = f"#/experiments/{self.experiment_id}/runs/{self.run_id}"
            return f"{self.settings.tracking_uri}/{page}"
        return f"{self.settings.tracking_uri} (run {self.run_id})"

    def env(self) -> dict[str, str]:
        """What a trainer's process needs to report to this run (verl's and transformers'
        MLflow loggers read these)."""
        return {
            "MLFLOW_TRACKING_URI": self.settings.tracking_uri,
            "MLFLOW_EXPERIMENT_NAME": self.settings.experiment,
            "MLFLOW_RUN_ID": self.run_id,
        }

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The run as MLflow's active run in this process, for the loggers that log to the
        active run (transformers' MLflowCallback, through trl's ``report_to``)."""
        import mlflow

        mlflow.set_tracking_uri(self.settings.tracking_uri)
        mlflow.start_run(run_id=self.run_id)
        try:
            yield
        finally:
            mlflow.flush_async_logging()
            mlflow.end_run()  # marks it finished: it runs on until its owner finishes it
            self.client.update_run(self.run_id, status="RUNNING")

    def finish(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
