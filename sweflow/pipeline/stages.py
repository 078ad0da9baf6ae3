"""The pipeline's stages as plain functions: config + upstream outputs in, files and a summary out.

Prefect wraps these (tasks/), but nothing here knows about it: a stage can be run and tested on
its own. Each returns a :class:`StageResult` whose ``digest`` is a content digest of what it
wrote, so that a later stage's cache key changes exactly when its inputs do.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sweflow.envcache.builder import BuildOptions, EnvBuilder
from sweflow.envcache.specs import load_specs
from sweflow.envcache.validate import validate, write_outputs
from sweflow.errors import SweflowError
from sweflow.instances import Instance, load_instances
from sweflow.pipeline.config import SECTIONS, PipelineConfig, Stage

Progress = Callable[[int, int, str], None]  # (done, total, what)


class StageError(SweflowError):
    """A stage that cannot produce its outputs for a reason retrying will not change."""


@dataclass
class StageResult:
    stage: str
    digest: str  # of the outputs, for downstream cache keys
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path
    counts: dict[str, int] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # one table row per instance/run

    def to_dict(self) -> dict:
        return asdict(self)


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (a stage's cache key must see contents, not just a path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def json_digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stage_inputs(config: PipelineConfig, stage: Stage, upstream: list[dict]) -> dict:
    """What a stage's result depends on: its config sections, upstream digests, the data, code.

    Paths are keyed by content (a file path as an input would ignore its contents), and the
    library's stage code is part of the key, so an edited stage is never served from cache.
    """
    inputs: dict = {
        "sections": {
            name: getattr(config, name).model_dump(mode="json") for name in SECTIONS[stage]
        },
        "upstream": [u["digest"] for u in upstream],
        "code": file_digest(Path(__file__)),
    }
    if stage in ("build_envs", "validate_envs"):
        inputs["dataset"] = file_digest(config.dataset.path)
        inputs["specs"] = file_digest(config.dataset.specs_path())
    return inputs


def load_tasks(config: PipelineConfig, path: Path | None = None) -> list[Instance]:
    """The dataset (or an earlier stage's output), narrowed by ``instances`` and ``limit``."""
    section = config.dataset
    result = load_instances(path or section.path, instances=section.instances)
    instances = result.raise_for_errors()
    return instances[: section.limit] if section.limit else instances


def make_builder(config: PipelineConfig) -> EnvBuilder:
    envs = config.envs
    options = BuildOptions(
        store=config.store(),
        repo_mirror=config.dataset.mirror(),
        wheelhouse=envs.wheelhouse,
        max_workers=envs.max_workers,
        timeout_s=envs.timeout_s,
    )
    return EnvBuilder(load_specs(config.dataset.specs_path()), options)


def build_envs(config: PipelineConfig, progress: Progress | None = None) -> StageResult:
    """Build every instance's layers (cached ones are found); fails only if none built."""
    tasks = load_tasks(config)
    builder = make_builder(config)
    finished = Counter()

    def on_build(instance_id: str, status: str) -> None:
        if progress is not None and status in ("built", "cached", "error"):
            finished["n"] += 1
            progress(finished["n"], len(tasks), f"{status}: {instance_id}")

    builder.progress = on_build
    results = builder.build(tasks)
    counts = Counter(r.status for r in results)
    rows = [
        {"instance": r.instance_id, "status": r.status, "seconds": r.seconds, "error": r.error}
        for r in results
    ]
    if counts["error"] == len(results):
        raise StageError(f"no instance built; first error: {results[0].error}")
    manifests = {
        t.instance_id: [layer.digest for layer in m.layers]
        for t in tasks
        if (m := builder.store.read_manifest(t.instance_id)) is not None
    }
    return StageResult(
        "build_envs",
        json_digest(manifests),
        {"store": str(config.store())},
        dict(counts),
        rows,
    )


def validate_envs(
    config: PipelineConfig, _built: dict | None = None, progress: Progress | None = None
) -> StageResult:
    """Check each built instance both ways; the valid ones become the stage's dataset."""
    tasks = load_tasks(config)
    builder = make_builder(config)
    built = {r.instance_id: r for r in builder.build(tasks)}  # all cached after build_envs
    prepared = [builder.prepare_validation(t, built[t.instance_id]) for t in tasks]
    out = config.run_dir / "validate"
    done = Counter()

    def on_done(result) -> None:
        done["n"] += 1
        if progress is not None:
            progress(done["n"], len(prepared), f"{result.outcome}: {result.instance_id}")

    results = validate(
        prepared,
        out / "logs",
        runs=config.envs.validate_runs,
        timeout=config.envs.timeout_s,
        max_workers=config.envs.max_workers,
        on_done=on_done,
    )
    dataset = out / "validated.jsonl"
    write_outputs(results, tasks, dataset, out)
    counts = Counter(r.outcome for r in results)
    if not counts["valid"]:
        raise StageError(f"no instance is valid; see {out / 'validation.md'}")
    rows = [{"instance": r.instance_id, "outcome": r.outcome, "reason": r.reason} for r in results]
    return StageResult(
        "validate_envs",
        file_digest(dataset),
        {"dataset": str(dataset), "report": str(out / "validation.md")},
        dict(counts),
        rows,
    )
