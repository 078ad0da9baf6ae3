"""``rl``: the policy (the run's SFT model, else its base) acts as the agent on the train split
and is updated on its own sandboxed, graded rollouts (sweflow.training.rl)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.envcache.store import LayerStore
from sweflow.pipeline.model_servers import ModelServers
from sweflow.pipeline.stages.agents import split_rows
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    StageResult,
    bring_instances,
    make_executor,
)
from sweflow.serving import resolve_model
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.result import RLResult, StepRecord
from sweflow.training.rl.trainer import train
from sweflow.training.workdir import folder_digest

if TYPE_CHECKING:
    from sweflow.pipeline.config import PipelineConfig


def policy_model(config: PipelineConfig, upstream: dict[str, dict]) -> tuple[str, Path]:
    """(the reference, the folder) of the policy: ``rl.model``, else the run's SFT model, else
    ``model.source``."""
    if config.rl.model:
        return config.rl.model, resolve_model(config.rl.model, cache=config.run_dir / "models")
    if "sft" in upstream:
        folder = Path(upstream["sft"]["outputs"]["model"])
        return str(folder), folder
    return config.model.source, resolve_model(config.model.source, cache=config.run_dir / "models")


def policy_digest(config: PipelineConfig) -> dict[str, str]:
    """The cache key has the starting policy's content (an SFT model's is its stage digest)."""
    if not config.rl.model and "sft" in config.stages:
        return {}
    return {"policy": folder_digest(policy_model(config, {})[1])}


def rl(ctx: StageContext) -> StageResult:
    """GRPO steps on the train split's tasks; the result is the model ``infer`` serves next."""
    config = ctx.config
    settings = RLConfig(**config.rl.model_dump())
    reference, policy = policy_model(config, ctx.upstream)
    store = LayerStore(config.store())
    train_rows = split_rows(ctx, "train", None)
    bring_instances(config, [row.instance_id for row in train_rows])
    rows = []
    for row in train_rows:
        if store.read_manifest(row.instance_id) is None:
            why = f"skipped {row.instance_id}: its environment is not built"
            ctx.progress(0, settings.steps, why)
        else:
            rows.append(row)
    if not rows:
        raise StageError(f"no train task has a built environment in {store.root}")
    work = config.run_dir / "rl"
    mode = ModelServers.tool_mode(config.model, config.agent, config.run_dir, policy)

    def on_step(step: int, total: int, record: StepRecord) -> None:
        reward = "-" if record.mean_reward is None else f"{record.mean_reward:+.3f}"
        ctx.progress(step, total, f"step {step}: reward {reward}, resolved "
                     f"{record.resolve_rate:.0%}, valid actions {record.valid_action_rate:.0%}, "
                     f"{record.refused} refused by the tamper guard, "
                     f"{record.infra_failures} infra failures")  # fmt: skip

    # the run's executor: trl's sandboxes and gradings on its nodes, verl on its Ray cluster
    with contextlib.closing(make_executor(config)) as executor:
        if settings.ray_address is None:
            settings = settings.model_copy(update={"ray_address": executor.ray_address})
        result = train(rows, policy, work, work / "model", settings, store=config.store(),
                       specs=config.dataset.specs_path(), agent=config.agent.agent_config(mode),
                       backend=config.sandbox.backend, policy_name=reference,
                       progress=on_step, executor=executor)  # fmt: skip
    outputs = {"model": result.model, "metrics": str(work / "metrics.jsonl"),
               "tensorboard": result.tensorboard, "curves": result.curves or ""}  # fmt: skip
    counts = {"tasks": result.tasks, "steps": result.steps}
    if result.infra_failures is not None:  # verl does not count them
        counts["infra_failures"] = result.infra_failures
    rows_out = [_row(record) for record in result.records]
    return StageResult("rl", result.inputs_digest, outputs, counts, rows_out, report(result))


def _row(record: dict) -> dict:
    keys = ("step", "mean_reward", "resolve_rate", "valid_action_rate", "episode_turns",
            "refused", "zero_spread_groups", "redrawn_groups", "infra_failures", "generation_s",
            "env_s", "update_s", "loss")  # fmt: skip
    return {key: record.get(key) for key in keys}


def report(result: RLResult) -> str:
    """The stage's Markdown report: the reward over the steps and where the time went."""
    first, last = result.quarter_rewards()
    records = result.records
    seconds = {key: sum(r[key] for r in records) for key in ("generation_s", "env_s", "update_s")
               if all(r[key] is not None for r in records)}  # fmt: skip
    total = sum(seconds.values()) or 1.0
    split = ", ".join(f"{key[:-2]} {value:.0f} s ({value / total:.0%})"
                      for key, value in seconds.items())  # fmt: skip
    quarters = (
        f"mean reward {first:+.3f} in the first quarter of the steps, {last:+.3f} in the last"
        if first is not None and last is not None
        else "no step had a scored episode"
    )
    dropped = "" if result.infra_failures is None else (
        f"; {result.infra_failures} episodes dropped as infrastructure failures"
    )  # fmt: skip
    return (
        f"Trained `{result.base_model}` with GRPO ({result.backend}) for {result.steps} steps on "
        f"{result.tasks} train tasks: {quarters}{dropped}.\n\nTime: {split}.\n\n"
        f"Curves: `{result.curves}` (TensorBoard: `{result.tensorboard}`)."
    )
