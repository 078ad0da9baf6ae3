"""The chain every flow runs: the target stages and what they read from, one cached task each.

A stage flow runs its stage and whatever that stage reads from (normally Cached), so
``prefect deployment run 'evaluate/demo'`` re-runs evaluation alone on the outputs already on
disk. Results persist under ``<run_dir>/.prefect-results`` (a LocalFileSystem block per run dir).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from prefect.artifacts import create_markdown_artifact
from prefect.filesystems import LocalFileSystem
from prefect.runtime import flow_run

from sweflow.pipeline.config import PipelineConfig, check_config, load_pipeline_config
from sweflow.pipeline.registry import BY_NAME
from sweflow.pipeline.stages.common import stage_inputs
from sweflow.tracking.run import finish_run
from tasks import stage_tasks

ROOT = Path(__file__).resolve().parent.parent  # where the bundled deployments run
DEFAULT_CONFIG = ROOT / "configs" / "demo.yaml"


def default_config() -> PipelineConfig:
    return load_pipeline_config(DEFAULT_CONFIG, root=ROOT)


def result_storage(config: PipelineConfig) -> str:
    """A saved LocalFileSystem block rooted in the run directory (Prefect needs it saved)."""
    root = (config.run_dir / ".prefect-results").resolve()
    name = "sweflow-results-" + hashlib.sha256(str(root).encode()).hexdigest()[:12]
    LocalFileSystem(basepath=str(root)).save(name, overwrite=True)
    return f"local-file-system/{name}"


def run_pipeline(config: PipelineConfig, targets: Sequence[str]) -> dict[str, dict]:
    """Run ``targets`` and what they read from, in order; each stage is one cached task.

    A config that cannot work (a form's values are checked only by type) fails the flow here,
    before any task: no stage is retried for it. Every stage reports to one tracking run,
    named after this flow run and keyed by its id."""
    check_config(config, Path.cwd())
    if flow_run.id is not None:
        tracking = config.tracking.for_run(flow_run.name, str(flow_run.id))
        config = config.model_copy(update={"tracking": tracking})
    storage = result_storage(config)
    forced = config.forced()
    results: dict[str, dict] = {}
    failed = True
    try:
        for name in config.needed(targets):
            stage = BY_NAME[name]
            upstream = {u: results[u] for u in (*stage.upstream, *stage.after) if u in results}
            task = stage_tasks.TASKS[name].with_options(
                result_storage=storage,
                retries=config.retries,
                refresh_cache=True if name in forced else None,
            )
            inputs = stage_inputs(config, name, list(upstream.values()))
            results[name] = task(config, inputs, upstream)
        failed = False
    finally:
        stage_tasks.MODEL_SERVERS.close()  # a vLLM started for the agent stages
        if config.tracking.enabled and config.tracking.run_key:
            track_links(config, finish_run(config.tracking, failed))
    return results


def track_links(config: PipelineConfig, links: dict[str, str]) -> None:
    """The flow run's tracking run, linked from its artifacts."""
    lines = "\n".join(f"- **{tracker}**: {link}" for tracker, link in links.items())
    key = f"{config.name}-tracking".lower().replace("_", "-")
    create_markdown_artifact(f"# Tracking\n\n{lines}\n", key=key)
