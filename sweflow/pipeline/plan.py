"""What each stage of a pipeline config would start, with nothing started (``sweflow pipeline
plan``).

A recipe written for eight GPUs is checked on the machine it is written on: the config is
validated as a run validates it, then each stage shows what it would run, made by the functions
the stage itself calls: torchtune's ``tune run`` command and recipe YAML for ``sft``, verl's
config (composed by verl's own Hydra where verl's environment exists, its overrides checked
against verl's schema always) and launch.sh for ``rl`` with backend verl, and vLLM's server
command for every stage that serves a model. Nothing is built, downloaded or started: a model
that is not here yet is named by its Hub id (vLLM takes one) and its recipe YAML, which lists
the model's files, is left to the run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sweflow.pipeline.sections import ModelSection
from sweflow.pipeline.stages.common import newest_trained
from sweflow.serving import ServeConfig, cached_model, vllm_command

if TYPE_CHECKING:
    from sweflow.pipeline.config import PipelineConfig

PORT = 8000  # the plan's stand-in: a run takes a free port when the server starts


@dataclass(frozen=True)
class Shown:
    """A command or file a stage would run or write, as text in its language."""

    title: str
    text: str
    language: str  # bash, yaml


@dataclass(frozen=True)
class StagePlan:
    stage: str
    summary: str
    shown: list[Shown] = field(default_factory=list)


def plan(config: PipelineConfig, compose_in: Path | None = None) -> list[StagePlan]:
    """Each of the config's stages, in pipeline order, with what it would start;
    ``compose_in`` is a scratch folder where verl composes its config (None: not composed)."""
    planners = {
        "build_envs": _build,
        "validate_envs": _validate,
        "collect_trajectories": _collect,
        "sft": _sft,
        "rl": lambda c: _rl(c, compose_in),
        "infer": _infer,
        "evaluate": _evaluate,
        "report": _report,
    }
    return [planners[stage](config) for stage in config.needed(config.stages)]


def trackers(config: PipelineConfig) -> str:
    """Where the run's trainers report, in words."""
    tracking = config.tracking
    names = [f"MLflow {tracking.mlflow.tracking_uri}"] if tracking.mlflow else []
    if tracking.wandb:
        names.append(f"W&B {tracking.wandb.project} ({tracking.wandb.mode})")
    return ", ".join(names + (["TensorBoard"] if tracking.tensorboard else [])) or "nothing"


def _build(config: PipelineConfig) -> StagePlan:
    data, envs = config.dataset, config.envs
    second = f" and {data.eval.path} ({data.eval.format})" if data.eval else ""
    images = f", from the rows' images ({envs.images})" if envs.images else ""
    return StagePlan(
        "build_envs",
        f"build the layers of {data.path} ({data.format}){second} into {config.store()}"
        f"{images}, {envs.max_workers} at once",
    )


def _validate(config: PipelineConfig) -> StagePlan:
    runs = config.envs.validate_runs
    return StagePlan(
        "validate_envs",
        f"run each built row's tests {runs} time(s) before and after its fix, in "
        f"{config.sandbox.backend} sandboxes ({config.sandbox.max_open} open at once)",
    )


def _collect(config: PipelineConfig) -> StagePlan:
    teacher = config.collect.teacher
    summary = (
        f"{config.collect.rollouts} graded run(s) of each train task (limit "
        f"{config.collect.limit or 'none'}) by the {teacher.kind} teacher, "
        f"{config.agent.concurrency} at once"
    )
    if teacher.kind != "served":
        return StagePlan("collect_trajectories", summary)
    return StagePlan("collect_trajectories", summary, _served(config, config.model.source))


def _sft(config: PipelineConfig) -> StagePlan:
    from sweflow.training.sft import data as sft_data
    from sweflow.training.sft import recipe
    from sweflow.training.sft.config import SFTConfig

    settings = SFTConfig(**config.sft.model_dump())
    reference = settings.model or config.model.source
    work = config.run_dir / "sft"
    sources = [s.source for s in settings.data] if settings.data else ["collect"]
    summary = (
        f"fine-tune {reference} ({settings.method}) on {', '.join(map(str, sources))}: "
        f"{settings.gpus} GPU(s) x {settings.nnodes} node(s), {settings.epochs} epoch(s); "
        f"reports to {trackers(config)}"
    )
    config_path = work / "recipe.yaml"
    shown = [Shown("torchtune", shlex.join(recipe.command(settings, config_path)), "bash")]
    folder = cached_model(reference, config.run_dir / "models")
    if folder is None:
        summary += f"; {config_path} lists the model's files once {reference} is downloaded"
    else:
        device, dtype = recipe.resolve_device(settings)
        data = sft_data.data_dir(work) / sft_data.TRAIN_FILE
        run = recipe.RecipePlan(folder, data, 0, work, device, dtype)
        body = recipe.recipe_config(settings, run, resume=False)
        shown.append(Shown(str(config_path), yaml.safe_dump(body, sort_keys=False), "yaml"))
    return StagePlan("sft", summary, shown)


def _rl(config: PipelineConfig, compose_in: Path | None) -> StagePlan:
    from sweflow.pipeline.stages.rl import planned_policy
    from sweflow.training.rl.config import RLConfig

    rl = RLConfig(**config.rl.model_dump())
    policy = planned_policy(config)
    summary = (
        f"{rl.steps} {rl.algorithm} step(s) of {rl.backend} on {policy}: {rl.tasks_per_step} "
        f"task(s) x {rl.rollouts_per_task} rollouts a step"
    )
    if rl.validation is not None:
        summary += f", validated every {rl.validation.every} step(s)"
    summary += f"; reports to {trackers(config)} (the run adds their loggers)"
    from sweflow.training.rl.backend import LaunchedBackend, rl_backend

    backend = rl_backend(rl.backend)
    if not isinstance(backend, LaunchedBackend):
        return StagePlan("rl", summary)
    name, work = backend.trainer, config.run_dir / "rl"
    composed, launch = backend.preview(
        rl,
        str(policy),
        work,
        validation=rl.validation is not None,
        compose_in=compose_in,
        max_turns=config.agent.max_steps,
    )
    shown = [Shown(str(work / backend.folder / "launch.sh"), launch, "bash")]
    if composed is not None:
        shown.append(Shown(f"{name}'s config, as {name} composes it", composed, "yaml"))
    else:
        venv = f".venv-{backend.environment.name}"
        summary += f"; {name}'s config not composed ({venv} not installed)"
    return StagePlan("rl", summary, shown)


def _infer(config: PipelineConfig) -> StagePlan:
    trained = newest_trained(config)
    model = trained or config.model.source
    summary = (
        f"{config.infer.samples} sample(s) of each eval task (limit "
        f"{config.infer.limit or 'none'}) with {model}, {config.agent.concurrency} at once"
    )
    return StagePlan("infer", summary, _served(config, model))


def _evaluate(config: PipelineConfig) -> StagePlan:
    guard = ", tamper guard on" if config.eval.tamper_guard else ""
    return StagePlan(
        "evaluate",
        f"grade preds.json in fresh {config.sandbox.backend} sandboxes, "
        f"{config.eval.max_workers} at once{guard}: swebench's report as run {config.eval.run_id}",
    )


def _report(config: PipelineConfig) -> StagePlan:
    return StagePlan("report", f"the run's report in {config.run_dir}, base model beside trained")


def _served(config: PipelineConfig, model: str | Path) -> list[Shown]:
    """vLLM's command for ``model`` (a folder, a bundled name, a Hub id), as the run starts it;
    none when the section names an endpoint to use as is."""
    section: ModelSection = config.model
    if section.url is not None and model == section.source:
        return []
    folder = cached_model(model, config.run_dir / "models")
    serve = ServeConfig(
        model=folder or Path(str(model)),
        served_name=section.name,
        port=PORT,
        max_model_len=section.max_model_len,
        tool_parser="auto" if folder else None,
        extra_args=section.serve_args(),
    )
    argv, _ = vllm_command(serve, gpu=True)
    title = "vLLM" if folder else "vLLM (its tool parser is chosen once the model is here)"
    return [Shown(title, shlex.join(argv), "bash")]
