"""The pipeline's one config: a section per stage, validated by pydantic (the Prefect UI's form).

Relative paths are relative to the directory the pipeline runs in (the repository root for the
bundled deployments). Every stage writes under ``run_dir``; ``stages`` picks a subset and
``force`` re-runs stages (and what depends on them) even when their cached result is valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sweflow.configfile import read_yaml_mapping, validate_model
from sweflow.errors import SweflowError

Stage = Literal["build_envs", "validate_envs", "collect_trajectories", "infer", "evaluate"]
STAGES: tuple[Stage, ...] = (
    "build_envs",
    "validate_envs",
    "collect_trajectories",
    "infer",
    "evaluate",
)
# What each stage reads from earlier ones: forcing a stage forces everything downstream of it.
UPSTREAM: dict[Stage, tuple[Stage, ...]] = {
    "build_envs": (),
    "validate_envs": ("build_envs",),
    "collect_trajectories": ("validate_envs",),
    "infer": ("validate_envs",),
    "evaluate": ("infer",),
}

# The config sections each stage reads: its cache key covers these and nothing else.
SECTIONS: dict[Stage, tuple[str, ...]] = {
    "build_envs": ("dataset", "envs"),
    "validate_envs": ("dataset", "envs"),
    "collect_trajectories": ("model", "agent", "collect", "sandbox"),
    "infer": ("model", "agent", "infer", "sandbox"),
    "evaluate": ("eval", "sandbox"),
}


class PipelineConfigError(SweflowError):
    """A pipeline config that cannot be used; the message names the file and field."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSection(Section):
    path: Path = Field(Path("data/demo/tasks.jsonl"), description="JSON/JSONL/parquet tasks")
    specs: Path | None = Field(None, description="environment specs; default beside the data")
    repo_mirror: Path | None = Field(None, description="git repos or bundles; default repos/")
    instances: list[str] | None = Field(None, description="only these instance ids")
    limit: int | None = Field(None, ge=1, description="only the first N instances")

    def specs_path(self) -> Path:
        return self.specs or self.path.with_name("specs.yaml")

    def mirror(self) -> Path:
        return self.repo_mirror or self.path.parent / "repos"


class EnvsSection(Section):
    store: Path | None = Field(None, description="layer store; default <run_dir>/store")
    wheelhouse: Path | None = Field(None, description="install offline from these wheels")
    max_workers: int = Field(2, ge=1)
    validate_runs: int = Field(1, ge=1, description="runs each way (more flag flaky tests)")
    timeout_s: float = Field(1800.0, gt=0, description="per build step and test run")


class SandboxSection(Section):
    backend: Literal["local", "docker"] = "local"
    max_open: int = Field(8, ge=1, description="sandboxes open at once (a global limit)")


class ModelSection(Section):
    """A served model: an endpoint to use, or a model folder that the stage serves itself."""

    name: str = Field("smollm2-135m-instruct", description="the served model name")
    url: str | None = Field(None, description="an OpenAI-compatible endpoint; None: serve")
    api_key: str = "EMPTY"
    path: Path | None = Field(None, description="a Hugging Face folder to serve")
    prepare: str | None = Field(
        "smollm2-135m-instruct", description="a bundled model to prepare when path is empty"
    )
    max_model_len: int = Field(4096, ge=256)
    startup_timeout_s: float = Field(900.0, gt=0)


class AgentSection(Section):
    tool_mode: Literal["auto", "tools", "text"] = Field(
        "auto", description="auto: tool calls when the served model has a tool parser"
    )
    step_limit: int = Field(10, ge=1)
    max_tokens: int = Field(512, ge=16, description="per model reply")
    wall_time_s: float = Field(600.0, gt=0, description="per run")
    concurrency: int = Field(4, ge=1, description="runs at once")


class CollectSection(Section):
    rollouts: int = Field(1, ge=1, description="runs per task")
    limit: int | None = Field(2, ge=1, description="tasks used (None: all validated)")


class InferSection(Section):
    limit: int | None = Field(3, ge=1, description="tasks used (None: all validated)")


class EvalSection(Section):
    run_id: str = "pipeline"
    max_workers: int = Field(2, ge=1)
    timeout_s: float = Field(1800.0, gt=0)


class PipelineConfig(Section):
    name: str = Field("demo", description="names the flow runs")
    run_dir: Path = Field(Path("runs/demo"), description="every stage's outputs go here")
    stages: list[Stage] = Field(default_factory=lambda: list(STAGES))
    force: list[Stage] = Field(default_factory=list, description="re-run despite the cache")
    retries: int = Field(2, ge=0, description="retries of infrastructure failures per stage")
    dataset: DatasetSection = Field(default_factory=DatasetSection)
    envs: EnvsSection = Field(default_factory=EnvsSection)
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    model: ModelSection = Field(default_factory=ModelSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    collect: CollectSection = Field(default_factory=CollectSection)
    infer: InferSection = Field(default_factory=InferSection)
    eval: EvalSection = Field(default_factory=EvalSection)

    def store(self) -> Path:
        return self.envs.store or self.run_dir / "store"

    def needed(self, targets: list[Stage]) -> list[Stage]:
        """The targets and every stage they read from, in pipeline order."""
        needed = set(targets)
        for stage in reversed(STAGES):
            if stage in needed:
                needed |= set(UPSTREAM[stage])
        return [s for s in STAGES if s in needed]

    def forced(self) -> set[Stage]:
        """The forced stages and every stage downstream of one."""
        forced = set(self.force)
        changed = True
        while changed:
            grown = {s for s in STAGES if set(UPSTREAM[s]) & forced} | forced
            changed, forced = grown != forced, grown
        return forced


def load_pipeline_config(path: Path | str, **overrides: Any) -> PipelineConfig:
    """Read a YAML config; ``overrides`` replace top-level keys (e.g. ``run_dir``)."""
    path = Path(path)
    data = read_yaml_mapping(path, "pipeline config", PipelineConfigError)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return validate_model(PipelineConfig, data, f"pipeline config {path}", PipelineConfigError)
