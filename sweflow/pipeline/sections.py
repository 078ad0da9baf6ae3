"""The pipeline config's sections: pydantic models, light to import (the Prefect UI's form).

Shared sections (dataset, envs, sandbox, model, agent) are read by several stages; a stage's own
section is named in its registration (sweflow.pipeline.registry). Where the library has a
config model of its own (the agent's limits and prompts, the model client's sampling), the
section embeds it, so every setting has one name everywhere: ``agent.max_steps`` in YAML is
``AgentConfig.max_steps`` in the library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sweflow.agent.config import AgentConfig, SamplingConfig, ServedTeacher, Teacher
from sweflow.configfile import FolderName
from sweflow.envcache.dataset import dataset_specs
from sweflow.sandbox.backends import DEFAULT_BACKEND
from sweflow.sandbox.spec import BackendName
from sweflow.serving.models import DEFAULT_MODEL
from sweflow.training.rl.config import RLConfig
from sweflow.training.sft.config import SFTConfig


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- shared ---------------------------------------------------------------------------------------
class DatasetSection(Section):
    path: Path = Field(Path("data/demo/tasks.jsonl"), description="JSON/JSONL/parquet tasks")
    specs: Path | None = Field(None, description="environment specs; default beside the data")
    repo_mirror: Path | None = Field(
        None, description="git repos or bundles; default repos/ beside the data, else its folder"
    )
    instances: list[str] | None = Field(None, description="only these instance ids")
    limit: int | None = Field(None, ge=1, description="only the first N instances")

    def specs_path(self) -> Path:
        return dataset_specs(self.path, self.specs)


class EnvsSection(Section):
    store: Path | None = Field(None, description="layer store; default <run_dir>/store")
    wheelhouse: Path | None = Field(None, description="install offline from these wheels")
    max_workers: int = Field(2, ge=1)
    validate_runs: int = Field(1, ge=1, description="runs each way (more flag flaky tests)")
    timeout_s: float = Field(1800.0, gt=0, description="per build step and test run")


class RaySection(Section):
    """The Ray cluster of ``executor: ray`` (nodes started with ``sweflow ray start``)."""

    address: str | None = Field(
        None, description="HOST:PORT of the head, or auto; None: a Ray started on this machine"
    )
    slots_per_task: float = Field(1.0, gt=0, description="sweflow_slot each instance takes")
    max_retries: int = Field(3, ge=0, description="re-runs of an instance whose node died")
    wait_timeout_s: float = Field(
        600.0, gt=0, description="fail when work waits this long and none can start"
    )


class SandboxSection(Section):
    backend: BackendName = DEFAULT_BACKEND
    max_open: int = Field(8, ge=1, description="sandboxes open at once (a global limit)")


class ModelSection(SamplingConfig, Section):
    """The model the run trains and serves: an endpoint to use as is, or a model that the run
    serves itself with vLLM; and how each call samples from it (the library's SamplingConfig)."""

    name: str = Field("smollm2-135m-instruct", description="the served model name")
    url: str | None = Field(None, description="an OpenAI-compatible endpoint; None: serve")
    api_key: str = "EMPTY"
    source: str = Field(
        DEFAULT_MODEL,
        description="what to serve and train: a Hugging Face folder, a bundled model name, or "
        "a Hub id (org/name[@revision])",
    )
    max_model_len: int = Field(4096, ge=256)
    startup_timeout_s: float = Field(900.0, gt=0)
    max_tokens: int | None = Field(512, gt=0, description="completion tokens per reply")


class AgentSection(AgentConfig, Section):
    """The library's AgentConfig (limits, prompts), with ``auto`` tool mode and concurrency."""

    tool_mode: Literal["auto", "tools", "text"] = Field(  # type: ignore[assignment]
        "auto", description="auto: tool calls when the served model has a tool parser"
    )
    max_steps: int = Field(10, gt=0, description="model calls per run")
    max_wall_s: float = Field(600.0, gt=0, description="whole run, model time included")
    concurrency: int = Field(4, ge=1, description="runs at once")

    def agent_config(self, tool_mode: Literal["tools", "text"]) -> AgentConfig:
        """The library's config for a run whose tool mode is now known."""
        fields = self.model_dump(exclude={"concurrency", "tool_mode"})
        return AgentConfig(**fields, tool_mode=tool_mode)


class SplitSection(Section):
    """Which validated tasks train (collect, sft, rl) and which evaluate (infer, evaluate).

    ``by: repo`` holds out the repositories named in ``eval``, ``by: ids`` the instance ids;
    the rest train. ``by: none`` uses every task for both (no held-out evaluation). The split is
    written to ``<run_dir>/split.json``.
    """

    by: Literal["none", "repo", "ids"] = "none"
    eval: list[str] = Field(default_factory=list, description="repos or ids held out")


# -- per stage ------------------------------------------------------------------------------------
class CollectSection(Section):
    teacher: Teacher = Field(
        default_factory=ServedTeacher,
        description="who plays the model: served (the run's model), endpoint (url, model, "
        "api_key_env) or replay (the gold patch through the agent's tools)",
    )
    rollouts: int = Field(1, ge=1, description="runs per task")
    limit: int | None = Field(2, ge=1, description="tasks used (None: all in the train split)")
    tamper_guard: bool = Field(
        True,
        description="refuse runs whose patch passes the tests without fixing anything "
        "(edits tests or their settings, reaches into the runner): never golden data",
    )


class SFTSection(SFTConfig, Section):
    """The library's SFTConfig; ``model: null`` fine-tunes the pipeline's ``model.source``."""


class RLSection(RLConfig, Section):
    """The library's RLConfig; ``model: null`` starts from the run's SFT model, else from the
    pipeline's ``model.source``. The agent section sets the episodes' tools and limits."""


class InferSection(Section):
    limit: int | None = Field(3, ge=1, description="tasks used (None: all in the eval split)")


class ReportSection(Section):
    baseline_cache: Path | None = Field(
        None,
        description="a JSON file that keeps the base model's held-out figures by model, tasks "
        "and settings (measured when missing); None: measured in every run that trains",
    )


class EvalSection(Section):
    run_id: FolderName = Field("pipeline", description="names the run's report and log folders")
    max_workers: int = Field(2, ge=1)
    timeout_s: float = Field(1800.0, gt=0)
    tamper_guard: bool = Field(
        False,
        description="refuse patches that pass the tests without fixing anything; off: "
        "the official harness's verdicts",
    )
