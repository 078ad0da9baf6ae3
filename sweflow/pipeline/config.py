"""The pipeline's one config: shared sections plus a section per stage, validated by pydantic
(the Prefect UI's form). The stage list, their order and their sections come from the registry.

Relative paths are relative to the directory the pipeline runs in (the repository root for the
bundled deployments). Every stage writes under ``run_dir``; ``stages`` picks a subset and
``force`` re-runs stages (and what depends on them) even when their cached result is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model, model_validator

from sweflow.configfile import FolderName, apply_overrides, read_yaml_mapping, validate_model
from sweflow.errors import ConfigError
from sweflow.paths import output_folder_problem
from sweflow.pipeline.registry import BY_NAME, STAGES, StageSpec
from sweflow.pipeline.sections import (
    AgentSection,
    DatasetSection,
    EnvsSection,
    ExecutorSection,
    ModelSection,
    SandboxSection,
    Section,
    SplitSection,
    TrackingSection,
)
from sweflow.tracking.check import tracking_problems

STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in STAGES)
Stage = Literal[STAGE_NAMES]  # type: ignore[valid-type]


class PipelineConfigError(ConfigError):
    """A pipeline config that cannot be used; the message names the file and field."""


class PipelineBase(Section):
    name: FolderName = Field("demo", description="names the flow runs (and their folders)")
    run_dir: Path = Field(Path("runs/demo"), description="every stage's outputs go here")
    stages: list[Stage] = Field(default_factory=lambda: list(STAGE_NAMES))
    force: list[Stage] = Field(default_factory=list, description="re-run despite the cache")
    retries: int = Field(2, ge=0, description="retries of infrastructure failures per stage")
    executor: ExecutorSection = Field(default_factory=ExecutorSection)
    dataset: DatasetSection = Field(default_factory=DatasetSection)
    envs: EnvsSection = Field(default_factory=EnvsSection)
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    model: ModelSection = Field(default_factory=ModelSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    split: SplitSection = Field(default_factory=SplitSection)
    tracking: TrackingSection = Field(
        default_factory=TrackingSection, description="MLflow, W&B and TensorBoard"
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        """A key of the earlier layout is refused naming where it went (extra keys would say
        only that they are not permitted): the executor's name and options are one section."""
        if isinstance(data, dict):
            if "ray" in data:
                raise ValueError("ray moved to executor.ray")
            if isinstance(data.get("executor"), str):
                raise ValueError("executor moved to executor.name")
        return data

    def store(self) -> Path:
        return self.envs.store or self.run_dir / "store"

    def needed(self, targets: Sequence[str]) -> list[str]:
        """The targets and every stage they read from, in pipeline order: their upstream, and
        their ``after`` stages that the config's ``stages`` include (the run's trained model)."""
        needed = set(targets)
        for stage in reversed(STAGES):
            if stage.name in needed:
                needed |= set(self.upstream_of(stage)) | (set(stage.after) & set(self.stages))
        return [name for name in STAGE_NAMES if name in needed]

    def upstream_of(self, stage: StageSpec) -> tuple[str, ...]:
        """The stages ``stage`` reads in this config: those of its upstream its own section's
        settings read (``Section.reads``: sft without collect when it trains on a public set)."""
        return self.section(stage.key).reads(stage.upstream) if stage.key else stage.upstream

    def forced(self) -> set[str]:
        """The forced stages and every stage downstream of one."""
        forced = set(self.force)
        for stage in STAGES:  # pipeline order: upstream stages come first
            if forced & {*stage.upstream, *stage.after}:
                forced.add(stage.name)
        return forced

    def section(self, key: str) -> Section:
        return getattr(self, key)


PipelineConfig = create_model(
    "PipelineConfig",
    __base__=PipelineBase,
    __module__=__name__,
    __doc__="The whole pipeline: shared sections, then one section per stage that has one.",
    **{
        stage.key: (stage.section, Field(default_factory=stage.section))
        for stage in STAGES
        if stage.key and stage.section
    },
)


def load_pipeline_config(
    path: Path | str, overrides: Sequence[str] = (), *, root: Path | None = None, **top_level: Any
) -> PipelineConfig:
    """Read a YAML config; ``overrides`` are dotted ``key=value`` settings (``agent.max_steps=12``,
    values in YAML syntax) and ``top_level`` replaces top-level keys (e.g. ``run_dir``). The
    result is checked (:func:`check_config`) against ``root``, the directory the pipeline will
    run in (default: this one)."""
    path = Path(path)
    data = read_yaml_mapping(path, "pipeline config", PipelineConfigError)
    data.update({k: v for k, v in top_level.items() if v is not None})
    apply_overrides(data, overrides, PipelineConfigError)
    config = validate_model(PipelineConfig, data, f"pipeline config {path}", PipelineConfigError)
    check_config(config, root or Path.cwd(), f"pipeline config {path}")
    return config


def dataset_paths(config: PipelineConfig, at: Callable[[Path], Path]) -> list:
    """The dataset paths to check as files or folders: not a Hub id (org/name[@rev][:split]) that
    names nothing on disk, which is read from the Hugging Face cache or downloaded."""
    from sweflow.instances.hub import parse_hub_name

    named = [("dataset.path", config.dataset.path)]
    if config.dataset.eval is not None:
        named.append(("dataset.eval.path", config.dataset.eval.path))
    return [
        (field, path, path.is_dir() if at(path).is_dir() else False, True)
        for field, path in named
        if at(path).exists() or parse_hub_name(str(path)) is None
    ]


def check_config(config: PipelineConfig, root: Path, where: str = "pipeline config") -> None:
    """What the schema cannot see, told before any stage runs (a stage would fail on it later,
    and a path error there reads as the machinery's and is retried): inputs that must exist,
    folders that are files, output folders of the system or not writable, models named like
    nothing, trackers that cannot take the run (a server that does not answer). Relative paths
    are relative to ``root``, the directory the pipeline runs in."""
    from sweflow.serving.models import is_model_folder, model_ref_problem

    def at(path: Path) -> Path:
        return path if path.is_absolute() else root / path

    problems = [
        f"{field}: {problem}"
        for field, path in (("run_dir", config.run_dir), ("envs.store", config.envs.store))
        if path is not None and (problem := output_folder_problem(at(path))) is not None
    ]
    paths = [  # (field, its value, a folder rather than a file, an input that must exist)
        *dataset_paths(config, at),
        ("dataset.specs", config.dataset.specs, False, True),
        ("dataset.repo_mirror", config.dataset.repo_mirror, True, True),
        ("envs.wheelhouse", config.envs.wheelhouse, True, True),
    ]
    sources = config.sft.data or []
    paths += [
        (f"sft.data[{i}]", Path(s.source), False, True)
        for i, s in enumerate(sources)
        if s.source != "collect" and s.hub() is None
    ]
    for field, path, folder, needed in paths:
        if path is None:
            continue
        if not at(path).exists():
            if needed:
                where_from = "" if path.is_absolute() else f" (relative to {root})"
                problems.append(f"{field}: {path} does not exist{where_from}")
        elif at(path).is_dir() != folder:
            kinds = ("a folder", "a file") if at(path).is_dir() else ("a file", "a folder")
            problems.append(f"{field}: {path} is {kinds[0]}, not {kinds[1]}")
    models = (
        ("model.source", config.model.source),
        ("sft.model", config.sft.model),
        ("rl.model", config.rl.model),
    )
    for field, ref in models:
        if ref is None or is_model_folder(at(Path(ref))):
            continue
        if (problem := model_ref_problem(ref)) is not None:
            problems.append(f"{field}: {problem}")
    problems += tracking_problems(config.tracking, root)
    if problems:
        raise PipelineConfigError(f"{where}: {'; '.join(problems)}")


__all__ = ["BY_NAME", "STAGE_NAMES", "PipelineConfig", "PipelineConfigError", "Stage"]
