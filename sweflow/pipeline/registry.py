"""The pipeline's stages, declared once each: the config, the Prefect tasks, the flows and the
deployments all derive from :data:`STAGES` (tests/project/test_registries.py checks the last).

Adding a stage is one module under ``sweflow/pipeline/stages/`` (its function takes a
:class:`~sweflow.pipeline.stages.common.StageContext` and returns a ``StageResult``), its config
section in ``sweflow/pipeline/sections.py`` if it has settings of its own, one line below, and
its entry in ``deployments/prefect.yaml``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweflow.pipeline.sections import (
    CollectSection,
    EvalSection,
    InferSection,
    ReportSection,
    RLSection,
    Section,
    SFTSection,
)
from sweflow.registered import load_named


@dataclass(frozen=True)
class StageSpec:
    """One stage: what it is called, what runs it, what it reads.

    ``run`` is ``module:function``, imported only when the stage runs. ``upstream`` are the
    stages whose outputs it reads (running it runs them; forcing one forces this one); ``after``
    are stages whose outputs it reads when they are part of the run (the newest trained model),
    without pulling them in. ``reads`` are the shared config sections its cache key covers; its
    own ``section`` (a field named ``key`` of the pipeline config) is covered too.
    ``serves_model`` stages get the run's lazily started vLLM server. ``inputs``
    (``module:function(config) -> dict``) adds what else its result depends on to its cache key
    (a model folder's digest).
    """

    name: str
    run: str
    description: str
    upstream: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    section: type[Section] | None = None
    key: str | None = None
    serves_model: bool = False
    inputs: str | None = None

    @property
    def flow_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def sections(self) -> tuple[str, ...]:
        """Every config section the stage's result depends on."""
        return (*self.reads, self.key) if self.key else self.reads

    def function(self) -> Callable[..., Any]:
        return load_named("stage function", self.run, {})

    def extra_inputs(self, config: Any) -> dict[str, Any]:
        return load_named("stage inputs", self.inputs, {})(config) if self.inputs else {}

    def source_file(self) -> Path:
        """The file that defines the stage (found without importing it), for cache keys."""
        spec = importlib.util.find_spec(self.run.partition(":")[0])
        assert spec is not None and spec.origin is not None, self.run
        return Path(spec.origin)


_STAGES = "sweflow.pipeline.stages"
STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        "build_envs",
        f"{_STAGES}.envs:build_envs",
        "Build (or find cached) every instance's layers.",
        reads=("dataset", "envs"),
    ),
    StageSpec(
        "validate_envs",
        f"{_STAGES}.envs:validate_envs",
        "Validate every built instance both ways; writes the validated dataset.",
        upstream=("build_envs",),
        reads=("dataset", "envs"),
    ),
    StageSpec(
        "collect_trajectories",
        f"{_STAGES}.agents:collect_trajectories",
        "Graded agent runs on validated tasks; the resolved ones become SFT data.",
        upstream=("validate_envs",),
        reads=("model", "agent", "sandbox", "split"),
        section=CollectSection,
        key="collect",
        serves_model=True,
    ),
    StageSpec(
        "sft",
        f"{_STAGES}.sft:sft",
        "Fine-tune the model on the collected trajectories (torchtune).",
        upstream=("collect_trajectories",),
        reads=("model",),
        section=SFTSection,
        key="sft",
        inputs=f"{_STAGES}.sft:base_model_digest",
    ),
    StageSpec(
        "rl",
        f"{_STAGES}.rl:rl",
        "On-policy RL (GRPO) on the train split, rewarded by the tests in sandboxes.",
        upstream=("validate_envs",),
        after=("sft",),
        reads=("model", "agent", "sandbox", "split"),
        section=RLSection,
        key="rl",
        inputs=f"{_STAGES}.rl:policy_digest",
    ),
    StageSpec(
        "infer",
        f"{_STAGES}.agents:infer",
        "One agent run per eval task with the newest model of the run; writes preds.json.",
        upstream=("validate_envs",),
        after=("sft", "rl"),
        reads=("model", "agent", "sandbox", "split"),
        section=InferSection,
        key="infer",
        serves_model=True,
    ),
    StageSpec(
        "evaluate",
        f"{_STAGES}.evaluate:evaluate",
        "Grade preds.json like swebench's run_evaluation (same files, same summary).",
        upstream=("infer",),
        reads=("sandbox",),
        section=EvalSection,
        key="eval",
    ),
    StageSpec(
        "report",
        f"{_STAGES}.report:report",
        "What the run did and learned: the base model beside the trained one.",
        upstream=("evaluate",),
        after=("build_envs", "validate_envs", "collect_trajectories", "sft", "rl", "infer"),
        reads=("model", "agent", "sandbox", "split", "infer"),
        section=ReportSection,
        key="report",
        serves_model=True,
    ),
)
BY_NAME: dict[str, StageSpec] = {stage.name: stage for stage in STAGES}
