"""``sft``: the collected golden trajectories fine-tune the run's model (torchtune)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.pipeline.model_servers import ModelServers
from sweflow.pipeline.stages.common import StageContext, StageResult, model_dir
from sweflow.serving import resolve_model
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import SFTResult, train_sft
from sweflow.training.workdir import folder_digest

if TYPE_CHECKING:
    from sweflow.pipeline.config import PipelineConfig

SPARKS = "▁▂▃▄▅▆▇█"


def base_model(config: PipelineConfig) -> tuple[str, Path]:
    """(the reference, the folder) of the model to fine-tune: ``sft.model``, else the run's."""
    reference = config.sft.model or config.model.source
    return reference, resolve_model(reference, cache=config.run_dir / "models")


def base_model_digest(config: PipelineConfig) -> dict[str, str]:
    """The stage's cache key has the base model's content, not only its name."""
    return {"base_model": folder_digest(base_model(config)[1])}


def sft(ctx: StageContext) -> StageResult:
    """Fine-tune ``sft.model`` (default: ``model.source``) on ``sft.data`` (default: collect's
    sft.jsonl), every row in the agent's tool mode (``sft.tool_mode`` else ``agent.tool_mode``)."""
    config = ctx.config
    collected = ctx.upstream.get("collect_trajectories")
    data = Path(collected["outputs"]["openai"]) if collected else None
    reference, base = base_model(config)
    work = config.run_dir / "sft"
    settings = SFTConfig(**config.sft.model_dump())
    # the student's tool mode: sft's, else the agent's (auto: the mode the model is served in)
    mode = settings.tool_mode or ModelServers.tool_mode(
        config.model, config.agent, config.run_dir, base
    )
    settings = settings.model_copy(update={"tool_mode": mode})

    def on_step(step: int, total: int, metrics: dict) -> None:
        ctx.progress(f"step {step}: loss {metrics['loss']:.4f}", step, total)

    result = train_sft(
        data,
        base,
        work,
        model_dir(config, "sft"),
        settings,
        base_name=reference,
        agent=config.agent,
        progress=on_step,
        tracking=ctx.tracking(),
    )
    report = result.data
    counts = {
        "rows converted": sum(s["converted"] for s in result.sources),
        "rows refused": sum(s["refused"] + s["refused_rendering"] for s in result.sources),
        "examples": report["examples"],
        "heldout": report["heldout_examples"],
        "steps": result.steps,
        "truncated": report["truncated"],
        "split": report["split"],
        "skipped": report["skipped_overlength"] + report["skipped_drift"],
        "malformed lines": len(report["malformed"]),
    }
    rows = [{"step": i + 1, "loss": loss} for i, loss in enumerate(result.losses)]
    outputs = {
        "model": result.model,
        "recipe": result.recipe_config,
        "tensorboard": result.tensorboard,
        "loss_plot": result.loss_plot or "",
        "data_report": result.data_report,
    }
    return StageResult("sft", result.inputs_digest, outputs, counts, rows, report_markdown(result))


def report_markdown(result: SFTResult) -> str:
    """The stage's Markdown report: what was trained, the loss curve in words and signs."""
    losses = result.losses
    curve = ""
    if losses:
        low, high = min(losses), max(losses)
        span = (high - low) or 1.0
        curve = "".join(SPARKS[int((x - low) / span * (len(SPARKS) - 1))] for x in losses)
    held = (result.heldout_loss_before, result.heldout_loss_after)
    held_text = (
        f"held-out loss {held[0]:.4f} -> {held[1]:.4f}" if None not in held else "no held-out set"
    )
    data = result.data
    return (
        f"Fine-tuned `{result.base_model}` with torchtune's `{result.recipe}` on "
        f"{data['examples']} conversations ({data['trained_tokens']:,} trained tokens, "
        f"{data['truncated']} truncated, {data['skipped_overlength']} skipped as too long, "
        f"{len(data['malformed'])} malformed lines skipped).\n\n"
        f"Training loss over {result.steps} steps: `{curve}` "
        f"({losses[0] if losses else '-'} -> {result.final_loss}); {held_text}; "
        f"{result.tokens_per_s} tokens/s.\n\n"
        f"Loss curve: `{result.loss_plot}` (TensorBoard: `{result.tensorboard}`)."
    )
