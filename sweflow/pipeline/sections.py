"""The pipeline config's sections: pydantic models, light to import (the Prefect UI's form).

Shared sections (dataset, envs, sandbox, model, agent) are read by several stages; a stage's own
section is named in its registration (sweflow.pipeline.registry). Where the library has a
config model of its own (the agent's limits and prompts, the model client's sampling), the
section embeds it, so every setting has one name everywhere: ``agent.max_steps`` in YAML is
``AgentConfig.max_steps`` in the library.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from sweflow.agent.config import AgentConfig, SamplingConfig, ServedTeacher, Teacher
from sweflow.agent.runs.selectors import DEFAULT_SELECTOR, SELECTORS, SelectorName
from sweflow.cluster.executors import DEFAULT_EXECUTOR, ExecutorName, RaySettings
from sweflow.configfile import ConfigModel, FolderName
from sweflow.envcache.dataset import Dataset, dataset_specs
from sweflow.formats import AUTO, FormatName
from sweflow.sandbox.backends import DEFAULT_BACKEND
from sweflow.sandbox.spec import BackendName
from sweflow.serving.models import DEFAULT_MODEL
from sweflow.tracking.config import TrackingConfig
from sweflow.training.rl.config import RLConfig
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.sources.spec import COLLECT


class Section(ConfigModel):
    """A section of the pipeline config (``ConfigModel``'s rules)."""

    def reads(self, upstream: tuple[str, ...]) -> tuple[str, ...]:
        """Which of its stage's ``upstream`` stages the stage reads with these settings: all."""
        return upstream


EVAL_PART = "pipeline_eval"  # set on the rows of dataset.eval: split.by dataset holds them out


# -- shared ---------------------------------------------------------------------------------------
class EvalDataset(Section):
    """A second dataset that evaluates (``split.by: dataset``): SWE-bench Lite beside an
    R2E-Gym training set, as the AgentSandbox cookbook sets it up."""

    path: Path = Field(description="a file, folder or Hugging Face id org/name[@revision][:split]")
    split: str | None = Field(None, description="its split (or :split in a Hub id)")
    format: FormatName = Field(AUTO, description="its format; auto: detected per row")
    limit: int | None = Field(None, ge=1, description="only its first N instances")


class DatasetSection(Section):
    path: Path = Field(
        Path("data/demo/tasks.jsonl"),
        description="JSON/JSONL/parquet tasks, a folder, or a Hugging Face id "
        "org/name[@revision][:split]",
    )
    split: str | None = Field(None, description="the split (or :split in a Hub id)")
    format: FormatName = Field(
        AUTO,
        description="swebench, swe-gym, swe-smith, r2e-gym, swe-rebench, sweflow; auto: "
        "detected per row",
    )
    specs: Path | None = Field(None, description="environment specs; default beside the data")
    repo_mirror: Path | None = Field(
        None, description="git repos or bundles; default repos/ beside the data, else its folder"
    )
    instances: list[str] | None = Field(None, description="only these instance ids")
    limit: int | None = Field(None, ge=1, description="only the first N instances")
    sort_by: str | None = Field(
        None,
        description="order the rows by this column (docker_image: the rows of one image "
        "together, so a node pulls each image once)",
    )
    eval: EvalDataset | None = Field(None, description="a second dataset for split.by: dataset")

    def specs_path(self) -> Path:
        """The specs file (its digest is part of the stages' cache keys), without reading it."""
        return dataset_specs(self.path, self.specs)

    def load(self) -> Dataset:
        """The dataset this section names, read once (``Dataset.load``), with the rows of
        ``eval`` after its own (marked ``EVAL_PART``)."""
        data = Dataset.load(
            self.path,
            specs=self.specs,
            mirror=self.repo_mirror,
            split=self.split,
            instances=self.instances,
            limit=self.limit,
            format=self.format,
        )
        if self.sort_by:
            column = self.sort_by
            data.rows.sort(key=lambda row: str(getattr(row, column, None) or ""))
        if self.eval is None:
            return data
        other = Dataset.load(
            self.eval.path,
            specs=self.specs,
            mirror=self.repo_mirror,
            split=self.eval.split,
            limit=self.eval.limit,
            format=self.eval.format,
        )
        for row in other.rows:
            setattr(row, EVAL_PART, True)
        return dataclasses.replace(
            data, rows=[*data.rows, *other.rows], specs=data.specs.merge(other.specs)
        )


class EnvsSection(Section):
    store: Path | None = Field(None, description="layer store; default <run_dir>/store")
    wheelhouse: Path | None = Field(None, description="install offline from these wheels")
    images: str | None = Field(
        None,
        description="rows with an image run on it: a folder of saved images (docker save, OCI) "
        "or registry:HOST[:PORT]; None: every row from its recipe",
    )
    max_workers: int = Field(2, ge=1)
    validate_runs: int = Field(1, ge=1, description="runs each way (more flag flaky tests)")
    timeout_s: float = Field(1800.0, gt=0, description="per build step and test run")


class ExecutorSection(Section):
    """Where per-instance work runs (builds, validations, gradings, agent runs): the executor's
    ``name``, and each executor's options under its name (``executor.ray``)."""

    name: ExecutorName = Field(
        DEFAULT_EXECUTOR, description="a registered executor, or a dotted path module:Class"
    )
    ray: RaySettings = Field(default_factory=RaySettings, description="executor ray's options")

    def options(self) -> dict:
        """The named executor's options: its section here, if it has one."""
        section = getattr(self, self.name, None)
        return section.model_dump() if isinstance(section, ConfigModel) else {}


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
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one served model spans (vLLM)")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="the share of each GPU vLLM takes; None: vLLM's default"
    )

    def serve_args(self) -> list[str]:
        """vLLM's options for these settings (beyond the model, name, port and length)."""
        args = []
        if self.tensor_parallel_size > 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return args


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

    ``by: repo`` holds out the repositories named in ``eval``, ``by: ids`` the instance ids,
    ``by: dataset`` the rows of ``dataset.eval``; the rest train. ``by: none`` uses every task
    for both (no held-out evaluation). The split is written to ``<run_dir>/split.json``.
    """

    by: Literal["none", "repo", "ids", "dataset"] = "none"
    eval: list[str] = Field(default_factory=list, description="repos or ids held out")


class TrackingSection(TrackingConfig, Section):
    """Where the run's stages report (the library's TrackingConfig): one tracking run per
    pipeline run, named after the Prefect flow run, each stage's names prefixed by the stage."""


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

    def reads(self, upstream: tuple[str, ...]) -> tuple[str, ...]:
        """collect's trajectories only when ``data`` names them (or names nothing): a recipe
        that fine-tunes on a public set collects nothing."""
        if self.data and all(source.source != COLLECT for source in self.data):
            return tuple(name for name in upstream if name != "collect_trajectories")
        return upstream


class RLSection(RLConfig, Section):
    """The library's RLConfig; ``model: null`` starts from the run's SFT model, else from the
    pipeline's ``model.source``. The agent section sets the episodes' tools and limits."""


class InferSection(Section):
    """The runs on the eval split. More than one sample per task: each is drawn at
    ``temperature`` with a seed derived from ``seed`` and its index, graded, and every selector
    picks one per task; ``predict``'s picks become preds.json, and the evaluation reports
    pass@k, best-of-n per selector and oracle pass@N beside swebench's report."""

    limit: int | None = Field(3, ge=1, description="tasks used (None: all in the eval split)")
    samples: int = Field(1, ge=1, description="samples per task (1: one run, not graded here)")
    temperature: float = Field(
        1.0, ge=0, description="the samples' temperature (one sample: model.temperature)"
    )
    seed: int = Field(0, ge=0, description="base seed: sample k's seed derives from it and k")
    selectors: list[SelectorName] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(SELECTORS), description="run on the samples"
    )
    predict: SelectorName = Field(  # type: ignore[valid-type]
        DEFAULT_SELECTOR, description="the selector whose picks become preds.json"
    )
    tamper_guard: bool = Field(
        True, description="samples whose patch passes the tests without fixing anything fail"
    )

    @model_validator(mode="after")
    def _predicting_selector_runs(self) -> InferSection:
        if self.predict not in self.selectors:
            raise ValueError(f"predict: {self.predict!r} is not among selectors {self.selectors}")
        return self


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
