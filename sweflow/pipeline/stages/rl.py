"""``rl``: the policy (the run's SFT model, else its base) acts as the agent on the train split
and is updated on its own sandboxed, graded rollouts (sweflow.training.rl)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.envcache.store import LayerStore
from sweflow.instances import Instance
from sweflow.pipeline.model_servers import ModelServers
from sweflow.pipeline.stages.agents import split_rows
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    bring_instances,
    make_executor,
    model_dir,
)
from sweflow.serving import resolve_model
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.result import RLResult, RLStepRecord
from sweflow.training.rl.trainer import train
from sweflow.training.rl.validation import pick
from sweflow.training.workdir import folder_digest

if TYPE_CHECKING:
    from sweflow.pipeline.config import PipelineConfig


def planned_policy(config: PipelineConfig) -> str | Path:
    """The policy RL starts from: ``rl.model``, else the run's SFT model (its folder), else
    ``model.source``."""
    if config.rl.model:
        return config.rl.model
    if "sft" in config.stages:
        return model_dir(config, "sft")
    return config.model.source


def policy_model(config: PipelineConfig) -> tuple[str, Path]:
    """(the reference, the folder) of :func:`planned_policy`, a named model fetched."""
    policy = planned_policy(config)
    if isinstance(policy, Path):  # the run's SFT model
        return str(policy), policy
    return policy, resolve_model(policy, cache=config.run_dir / "models")


def policy_digest(config: PipelineConfig) -> dict[str, str]:
    """The cache key has the starting policy's content (an SFT model's is its stage digest)."""
    if isinstance(planned_policy(config), Path):
        return {}
    return {"policy": folder_digest(policy_model(config)[1])}


def rl(ctx: StageContext) -> StageResult:
    """GRPO steps on the train split's tasks; the result is the model ``infer`` serves next."""
    config = ctx.config
    settings = RLConfig(**config.rl.model_dump())
    reference, policy = policy_model(config)
    store = LayerStore(config.store())
    train_rows = split_rows(ctx, "train", None)
    val_rows = validation_rows(ctx, settings, train_rows)
    bring_instances(config, [row.instance_id for row in train_rows + val_rows])
    rows, val_rows = (
        [row for row in part if built(ctx, store, row, settings.steps)]
        for part in (train_rows, val_rows)
    )
    if not rows:
        raise StageError(f"no train task has a built environment in {store.root}")
    work = config.run_dir / "rl"
    mode = ModelServers.tool_mode(config.model, config.agent, config.run_dir, policy)

    def on_step(step: int, total: int, record: RLStepRecord) -> None:
        reward = "-" if record.mean_reward is None else f"{record.mean_reward:+.3f}"
        ctx.progress(
            f"step {step}: reward {reward}, resolved "
            f"{record.resolve_rate:.0%}, valid actions {record.valid_action_rate:.0%}, "
            f"{record.refused} refused by the tamper guard, "
            f"{record.infra_failures} infra failures",
            step,
            total,
        )

    # the run's executor: trl's sandboxes and gradings on its nodes, verl and SkyRL on its Ray
    with contextlib.closing(make_executor(config)) as executor:
        for section in ("verl", "skyrl"):  # the outside trainers join the run's Ray
            cluster = getattr(settings, section)
            if cluster.ray_address is None:
                joined = cluster.model_copy(update={"ray_address": executor.ray_address})
                settings = settings.model_copy(update={section: joined})
        result = train(
            rows,
            policy,
            work,
            model_dir(config, "rl"),
            settings,
            store=config.store(),
            specs=ctx.dataset().specs,
            agent=config.agent.agent_config(mode),
            backend=config.sandbox.backend,
            policy_name=reference,
            progress=on_step,
            executor=executor,
            tracking=ctx.tracking(),
            val_tasks=val_rows,
        )
    outputs = {
        "model": result.model,
        "metrics": str(work / "metrics.jsonl"),
        "tensorboard": result.tensorboard,
        "curves": result.curves or "",
    }
    counts = {"tasks": result.tasks, "steps": result.steps}
    if result.validation:
        last = result.validation[-1]
        counts |= {f"validation pass@{k}": v for k, v in last["pass_at"].items()}
    if result.infra_failures is not None:  # verl does not count them
        counts["infra_failures"] = result.infra_failures
    rows_out = [_row(record) for record in result.records]
    return StageResult("rl", result.inputs_digest, outputs, counts, rows_out, report(result))


def validation_rows(ctx: StageContext, settings: RLConfig, train: list[Instance]) -> list:
    """The tasks ``rl.validation`` names: the eval split (the default), the train split or
    instance ids of the validated dataset."""
    if settings.validation is None:
        return []
    if settings.validation.tasks == "eval":
        return pick(settings.validation, train, [], split_rows(ctx, "eval", None))
    everything = train + split_rows(ctx, "eval", None)
    try:
        return pick(settings.validation, train, everything)
    except ValueError as exc:
        raise StageError(str(exc)) from None


def built(ctx: StageContext, store: LayerStore, row: Instance, steps: int) -> bool:
    """Whether ``row``'s environment is in the store (a task without one is skipped, said so)."""
    if store.read_manifest(row.instance_id) is not None:
        return True
    ctx.progress(f"skipped {row.instance_id}: its environment is not built", 0, steps)
    return False


def _row(record: dict) -> dict:
    keys = (
        "step",
        "mean_reward",
        "resolve_rate",
        "valid_action_rate",
        "episode_turns",
        "refused",
        "zero_spread_groups",
        "redrawn_groups",
        "infra_failures",
        "generation_s",
        "env_s",
        "update_s",
        "loss",
    )
    return {key: record.get(key) for key in keys}


def report(result: RLResult) -> str:
    """The stage's Markdown report: the reward over the steps and where the time went."""
    first, last = result.quarter_rewards()
    records = result.records
    seconds = {
        key: sum(r[key] for r in records)
        for key in ("generation_s", "env_s", "update_s")
        if all(r[key] is not None for r in records)
    }
    total = sum(seconds.values()) or 1.0
    split = ", ".join(
        f"{key[:-2]} {value:.0f} s ({value / total:.0%})" for key, value in seconds.items()
    )
    quarters = (
        f"mean reward {first:+.3f} in the first quarter of the steps, {last:+.3f} in the last"
        if first is not None and last is not None
        else "no step had a scored episode"
    )
    dropped = (
        ""
        if result.infra_failures is None
        else (f"; {result.infra_failures} episodes dropped as infrastructure failures")
    )
    measured = "; ".join(
        f"step {row['step']}: " + ", ".join(f"pass@{k} {v:.0%}" for k, v in row["pass_at"].items())
        for row in result.validation
    )
    validated = f"\n\nValidation (current policy): {measured}." if measured else ""
    return (
        f"Trained `{result.base_model}` with GRPO ({result.backend}) for {result.steps} steps on "
        f"{result.tasks} train tasks: {quarters}{dropped}.{validated}\n\nTime: {split}.\n\n"
        f"Curves: `{result.curves}` (TensorBoard: `{result.tensorboard}`)."
    )
