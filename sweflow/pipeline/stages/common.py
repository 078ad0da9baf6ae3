"""What every stage shares: its context in, its result out, content digests for cache keys.

Each stage returns a :class:`StageResult` whose ``digest`` is a content digest of what it wrote,
so that a later stage's cache key changes exactly when its inputs do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.errors import SweflowError
from sweflow.pipeline.registry import BY_NAME
from sweflow.pipeline.sections import EVAL_PART
from sweflow.progress import Progress, no_progress
from sweflow.training.workdir import file_digest

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor
    from sweflow.envcache.builder import EnvBuilder
    from sweflow.envcache.dataset import Dataset
    from sweflow.instances import Instance
    from sweflow.pipeline.config import PipelineConfig
    from sweflow.pipeline.model_servers import ModelServers
    from sweflow.tracking import TrackingRun


class StageError(SweflowError):
    """A stage that cannot produce its outputs for a reason retrying will not change."""


@dataclass
class StageContext:
    """What a stage runs with: the config, its upstream stages' results, a progress callback,
    the run's model servers (for stages that talk to a served model), the config's dataset
    (read the first time a stage asks, once per stage: stages may run in other processes) and
    the pipeline run's tracking run (opened the first time a stage asks, once per stage)."""

    config: PipelineConfig
    upstream: dict[str, dict] = field(default_factory=dict)
    progress: Progress = no_progress
    models: ModelServers | None = None
    loaded: Dataset | None = None
    tracked: TrackingRun | None = None

    def dataset(self) -> Dataset:
        if self.loaded is None:
            self.loaded = self.config.dataset.load()
        return self.loaded

    def tracking(self) -> TrackingRun | None:
        """The run the stage reports to (config ``tracking``), or None when none is set."""
        if self.tracked is None:
            from sweflow.tracking import open_tracking

            tracking = self.config.tracking
            self.tracked = open_tracking(tracking, self.config.name, self.config.run_dir)
        return self.tracked

    def model_servers(self) -> ModelServers:
        if self.models is None:
            from sweflow.pipeline.model_servers import ModelServers

            self.models = ModelServers()
        return self.models


@dataclass
class StageResult:
    stage: str
    digest: str  # of the outputs, for downstream cache keys
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path
    counts: dict[str, int] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # one table row per instance/run
    markdown: str = ""  # what the stage has to say beyond its counts (its report's body)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """The counts as a line for people: "36 built, 2 cached" (never a Python dict)."""
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in self.counts.items())
        return f"{self.stage}: {counts or 'done'}"


TRAINING_STAGES = ("rl", "sft")  # newest first


def model_dir(config: PipelineConfig, stage: str) -> Path:
    """Where training stage ``stage`` publishes its model: what the plan names before the run
    and the stage writes."""
    return config.run_dir / stage / "model"


def newest_trained(config: PipelineConfig) -> Path | None:
    """The model folder of the run's last training stage (RL, else SFT): what infer serves;
    None when the run trains none (the base is served)."""
    for stage in TRAINING_STAGES:
        if stage in config.stages:
            return model_dir(config, stage)
    return None


def json_digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stage_inputs(config: PipelineConfig, stage: str, upstream: list[dict]) -> dict:
    """What a stage's result depends on: its config sections, upstream digests, the data, code.

    Paths are keyed by content (a file path as an input would ignore its contents), and the
    library's stage code is part of the key, so an edited stage is never served from cache.
    """
    spec = BY_NAME[stage]
    inputs: dict = {
        "sections": {name: config.section(name).model_dump(mode="json") for name in spec.sections},
        "upstream": [u["digest"] for u in upstream],
        "code": [file_digest(spec.source_file()), file_digest(Path(__file__))],
    }
    if "dataset" in spec.reads:
        inputs["dataset"] = data_digest(config.dataset.path)
        inputs["specs"] = data_digest(config.dataset.specs_path())
        if config.dataset.eval is not None:
            inputs["eval_dataset"] = data_digest(config.dataset.eval.path)
    inputs.update(spec.extra_inputs(config))
    return inputs


def data_digest(path: Path) -> str:
    """A dataset's identity for cache keys: a file's bytes; a Hub id's text and its cached
    snapshot's commit (a folder by its name: the built-in specs, a saved dataset)."""
    if path.is_file():
        return file_digest(path)
    from sweflow.instances.hub import cached_snapshot, parse_hub_name

    hub = None if path.exists() else parse_hub_name(str(path))
    snapshot = cached_snapshot(hub) if hub else None
    return json_digest([str(path), snapshot.name if snapshot else None])


def load_tasks(config: PipelineConfig, path: Path) -> list[Instance]:
    """An earlier stage's rows (``path``), narrowed like the dataset: ``instances``, ``limit``."""
    from sweflow.instances import load_instances

    section = config.dataset
    instances = load_instances(path, instances=section.instances).raise_for_errors()
    return instances[: section.limit] if section.limit else instances


def split_tasks(config: PipelineConfig, rows: list[Instance]) -> dict[str, list[Instance]]:
    """The ``train`` and ``eval`` parts of validated rows (config ``split``), recorded in
    ``<run_dir>/split.json``. Names in ``split.eval`` that match no row are a ConfigError."""
    split = config.split
    held = set(split.eval)
    key = (lambda row: row.repo) if split.by == "repo" else (lambda row: row.instance_id)
    if split.by == "none":
        parts = {"train": rows, "eval": rows}
    elif split.by == "dataset":  # dataset.eval's rows evaluate, the dataset's own train
        marked = [bool((row.model_extra or {}).get(EVAL_PART)) for row in rows]
        parts = {
            "train": [row for row, held_out in zip(rows, marked, strict=True) if not held_out],
            "eval": [row for row, held_out in zip(rows, marked, strict=True) if held_out],
        }
    else:
        if unknown := held - {key(row) for row in rows}:
            what = "repositories" if split.by == "repo" else "instance ids"
            raise StageError(f"split.eval names {what} with no validated task: {sorted(unknown)}")
        parts = {
            "train": [row for row in rows if key(row) not in held],
            "eval": [row for row in rows if key(row) in held],
        }
    record = {
        "by": split.by,
        "eval_names": sorted(held),
        **{part: [row.instance_id for row in chosen] for part, chosen in parts.items()},
    }
    path = config.run_dir / "split.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return parts


def make_builder(config: PipelineConfig, data: Dataset) -> EnvBuilder:
    """The builder of the run's store for ``data`` (the config's), with its ``envs`` options."""
    envs = config.envs
    return data.builder(
        config.store(),
        wheelhouse=envs.wheelhouse,
        images=envs.images,
        max_workers=envs.max_workers,
        timeout_s=envs.timeout_s,
    )


def make_executor(config: PipelineConfig) -> Executor:
    """The executor the config names (``executor``), on the run's store, with its options."""
    from sweflow.cluster.executors import make_executor as make

    return make(config.executor.name, config.store(), **config.executor.options())


def bring_instances(config: PipelineConfig, instance_ids: list[str]) -> None:
    """Stages that run in this process (collect, infer, rl) read the run's store: the instances
    the nodes of a distributed executor built are fetched into it first."""
    with contextlib.closing(make_executor(config)) as executor:
        executor.bring(config.store(), instance_ids)


def instance_step(step: Callable[[str], None], executor: Executor) -> Callable[[str, str], None]:
    """``step`` for one instance's outcome, saying which node did it."""
    return lambda status, key: step(f"{status}: {key} ({executor.node_of(key)})")


def executor_markdown(executor: Executor, keys: list[str]) -> str:
    """Where a stage's instances ran, per node, and which ran twice: for the stage's artifact."""
    lines = [f"Ran on {executor.describe()}.", ""]
    per_node: dict[str, int] = {}
    for key in keys:
        node = executor.node_of(key) or "-"
        per_node[node] = per_node.get(node, 0) + 1
    lines += ["| node | instances |", "| --- | --- |"]
    lines += [f"| {node} | {count} |" for node, count in sorted(per_node.items())]
    retries = executor.retries()
    if retries:
        lines += ["", f"Retried {len(retries)} instance(s) whose node or worker died:"]
        lines += [f"- {r.item}: ran on {' then '.join(r.nodes)}" for r in retries]
    return "\n".join(lines)


def counter_progress(progress: Progress, total: int) -> Callable[[str], None]:
    """A callback that counts calls: each call reports one more of ``total`` done."""
    done = [0]

    def step(what: str) -> None:
        done[0] += 1
        progress(what, done[0], total)

    return step
