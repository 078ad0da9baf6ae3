"""Supervised fine-tuning: golden trajectories -> a fine-tuned model folder that vLLM serves.

``train_sft`` tokenizes the trajectories with the model's chat template (sweflow.training.sft.data),
measures the held-out loss of the base model, runs torchtune's recipe (sweflow.training.sft.recipe),
publishes the last epoch as a Hugging Face folder with a model card (sweflow.training.output),
measures the held-out loss of the result through transformers (which also proves it loads), and
plots the loss curve. A second call with the same inputs finds the published model and returns it.

With a tracking run (sweflow.tracking), the stage's settings and data figures are its ``sft.*``
parameters and metrics, torchtune's loggers report each step to it (``sft/loss``), and the
recipe config, loss plot, sample trajectories and the model's manifest are its artifacts.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.agent.config import AgentConfig
from sweflow.training.chat import ChatEncoder
from sweflow.training.output import CARD, RECORD, model_card, publish
from sweflow.training.sft import data as sft_data
from sweflow.training.sft import recipe
from sweflow.training.sft.architectures import checkpointer
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.losses import mean_loss
from sweflow.training.sft.sources.mix import SourceReport, write_mix
from sweflow.training.sft.sources.spec import COLLECT, DataSource
from sweflow.training.workdir import file_digest, folder_digest, work_lock

if TYPE_CHECKING:
    from sweflow.tracking import TrackingRun

Log = Callable[[str], None]
SAMPLES = 3  # conversations of the training data logged as the run's sample trajectories


@dataclass
class SFTResult:
    """What a fine-tune produced and measured (saved as the model's sweflow_training.json)."""

    model: str
    base_model: str
    recipe: str
    inputs_digest: str
    data: dict[str, Any]
    steps: int = 0
    final_loss: float | None = None
    heldout_loss_before: float | None = None
    heldout_loss_after: float | None = None
    tokens_per_s: float | None = None
    peak_rss_mb: float = 0.0
    train_seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    loss_plot: str | None = None
    recipe_config: str = ""
    tensorboard: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)  # what became of each --data row
    data_report: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_sft(
    data: Path | None,
    base: Path,
    work_dir: Path,
    out: Path,
    config: SFTConfig,
    *,
    base_name: str | None = None,
    agent: AgentConfig | None = None,
    progress: recipe.OnSFTStep | None = None,
    log: Log | None = None,
    tracking: TrackingRun | None = None,
) -> SFTResult:
    """Fine-tune ``base`` into ``out`` on ``config.data``'s sources, else on ``data`` (an
    sft.jsonl; also what a ``collect`` source names); ``work_dir`` keeps the rest. ``agent``:
    the prompts converted rows get (the student's). ``tracking`` is the run the stage
    reports to."""
    say = log or (lambda line: None)
    checkpointer(json.loads((base / "config.json").read_text()))  # names a bad one now
    sources = config.data or [DataSource(source=str(data) if data else COLLECT)]
    with work_lock(work_dir):
        say(f"reading {', '.join(s.source for s in sources)}")
        mixed, reports = write_mix(
            sources,
            sft_data.data_dir(work_dir),
            tool_mode=config.tool_mode,
            agent=agent or AgentConfig(),
            seed=config.seed,
            files={COLLECT: data} if data else None,
        )
        result = _train(
            mixed, base, work_dir, out, config, base_name, progress, say, reports, tracking
        )
    if tracking is not None:
        track(tracking, result, mixed, work_dir)
    return result


def _train(
    data: Path,
    base: Path,
    work_dir: Path,
    out: Path,
    config: SFTConfig,
    base_name: str | None,
    progress: recipe.OnSFTStep | None,
    say: Log,
    sources: list[SourceReport],
    tracking: TrackingRun | None,
) -> SFTResult:
    device, dtype = recipe.resolve_device(config)
    inputs = hashlib.sha256(
        json.dumps([file_digest(data), folder_digest(base), config.model_dump()]).encode()
    ).hexdigest()
    if tracking is not None:  # first: a tracker that refuses them, refuses before the work
        tracking.params("sft", {**config.model_dump(), "base_model": base_name or str(base)})
    if (done := _published(out, inputs)) is not None:
        say(f"already trained: {out}")
        if tracking is not None:  # its steps, as recorded, for this tracking run
            for step, loss in enumerate(done.losses, 1):
                tracking.metrics("sft", {"loss": loss}, step)
        return done
    say(f"tokenizing {data} with {base.name}'s chat template")
    train_path, heldout_path, report = sft_data.prepare(
        data,
        ChatEncoder(base),
        sft_data.data_dir(work_dir),
        max_seq_len=config.max_seq_len,
        overlength=config.overlength,
        heldout_fraction=config.heldout_fraction,
        seed=config.seed,
        max_sequences=config.max_sequences,
    )
    heldout = sft_data.load_examples(heldout_path) if heldout_path else []
    for source in sources:
        source.refused_rendering = report.drift_by_dataset.get(source.source, 0)
    result = SFTResult(
        model=str(out),
        base_model=base_name or str(base),
        recipe=recipe.recipe_name(config),
        inputs_digest=inputs,
        data=report.to_dict(),
        sources=[s.to_dict() for s in sources],
        data_report=str(write_data_report(work_dir / "data_report.json", sources, report)),
    )
    if heldout:
        say(f"held-out loss of the base model on {len(heldout)} conversations")
        result.heldout_loss_before = mean_loss(base, heldout)
    plan = recipe.RecipePlan(
        base,
        train_path,
        report.examples,
        work_dir,
        device,
        dtype,
        tensorboard=tracking is None or tracking.tensorboard,
        trackers=torchtune_trackers(tracking),
    )
    say(f"{result.recipe} on {device} ({dtype}): {report.examples} conversations")
    started = time.monotonic()
    with tracking.detached() if tracking else contextlib.nullcontext():  # the recipe reports
        outcome = recipe.run(config, plan, progress)
    records = outcome.records
    result.train_seconds = round(time.monotonic() - started, 1)
    result.peak_rss_mb = outcome.peak_rss_mb
    _measure(result, records, report, config)
    result.recipe_config = str(work_dir / "recipe.yaml")
    result.tensorboard = str(work_dir / "tensorboard")
    card = functools.partial(_card, result, config, file_digest(data))
    publish(recipe.last_epoch_dir(plan.checkpoints), base, out, dtype, result.to_dict(), card())
    if heldout:  # measured on the published folder (which proves it loads), so after publishing
        say("held-out loss of the fine-tuned model")
        result.heldout_loss_after = mean_loss(out, heldout)
    losses = {"before": result.heldout_loss_before, "after": result.heldout_loss_after}
    plot = plot_losses(records, losses, work_dir / "loss.png")
    result.loss_plot = str(plot) if plot else None
    (out / CARD).write_text(card())  # now with the held-out loss after training
    (out / RECORD).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    return result


def torchtune_trackers(tracking: TrackingRun | None) -> dict[str, dict[str, Any]]:
    """The arguments of torchtune's MLFlowLogger and WandBLogger that resume ``tracking``'s
    run in the recipe's process."""
    trackers: dict[str, dict[str, Any]] = {}
    if tracking is None:
        return trackers
    if tracking.mlflow is not None:
        settings = tracking.mlflow.settings
        trackers["mlflow"] = {
            "tracking_uri": settings.tracking_uri,
            "experiment_name": settings.experiment,
            "run_id": tracking.mlflow.run_id,
        }
    if (wandb := tracking.wandb_arguments()) is not None:
        trackers["wandb"] = wandb
    return trackers


def track(tracking: TrackingRun, result: SFTResult, data: Path, work_dir: Path) -> None:
    """The fine-tune's figures and artifacts in its tracking run (its steps are there
    already, from torchtune's loggers): data and held-out figures, the recipe config, the loss
    plot, a few of the trajectories it trained on, and the model's manifest."""
    figures = {
        **{k: v for k, v in result.data.items() if k != "split"},
        "heldout_loss_before": result.heldout_loss_before,
        "heldout_loss_after": result.heldout_loss_after,
        "final_loss": result.final_loss,
        "tokens_per_s": result.tokens_per_s,
        "train_seconds": result.train_seconds,
        "peak_rss_mb": result.peak_rss_mb,
    }
    tracking.metrics("sft", figures, result.steps)
    samples = work_dir / "samples.jsonl"
    with data.open() as lines:
        samples.write_text("".join(itertools.islice(lines, SAMPLES)))
    produced = [Path(p) for p in (result.recipe_config, result.loss_plot, result.data_report) if p]
    tracking.files("sft", [p for p in produced if p.is_file()])
    tracking.files("sft", [samples], "samples")
    tracking.model("sft", Path(result.model), work_dir)


def write_data_report(path: Path, sources: list[SourceReport], report: sft_data.DataReport) -> Path:
    """data_report.json: each source's rows kept, converted and refused (why), then what the
    rendering check and the tokenizer made of the mix."""
    tokenized = {k: v for k, v in report.to_dict().items() if k != "instances"}
    body = {"sources": [s.to_dict() for s in sources], "tokenized": tokenized}
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def _measure(
    result: SFTResult, records: list[dict], report: sft_data.DataReport, config: SFTConfig
) -> None:
    """Steps, losses and the all-token throughput of the steady steps (the first one loads)."""
    result.steps = len(records)
    result.losses = [round(r["loss"], 5) for r in records]
    result.final_loss = result.losses[-1] if records else None
    if len(records) >= 2 and report.examples:
        seconds = records[-1]["time"] - records[0]["time"]
        per_step = config.batch_size * config.gradient_accumulation_steps
        tokens = (len(records) - 1) * per_step * report.tokens / report.examples
        result.tokens_per_s = round(tokens / seconds, 1) if seconds > 0 else None


def _card(result: SFTResult, config: SFTConfig, data_digest: str) -> str:
    data = result.data
    summary = (
        f"{Path(result.base_model).name} fine-tuned with torchtune's `{result.recipe}` "
        f"({config.method}) on {data['examples']} SWE agent trajectories "
        f"({data['trained_tokens']:,} trained tokens; sources: {data['sources']}), rendered with "
        "the model's own chat template exactly as the agent sends them to vLLM; loss on the "
        f"assistant turns only. Base model: `{result.base_model}`; training data digest (sha256 of "
        f"sft.jsonl): `{data_digest}`; the recipe config: `recipe.yaml` beside the training run."
    )
    return model_card(
        base=result.base_model,
        tags=["sft", "torchtune"],
        title=f"{Path(result.base_model).name}, SFT (sweflow)",
        summary=summary,
        metrics=_card_metrics(result),
    )


def _card_metrics(result: SFTResult) -> dict[str, Any]:
    return {
        "optimizer steps": result.steps,
        "final training loss": result.final_loss,
        "held-out loss before": result.heldout_loss_before,
        "held-out loss after": result.heldout_loss_after,
        "tokens/s (all tokens, steady steps)": result.tokens_per_s,
        "peak RSS of the recipe (MB)": result.peak_rss_mb,
        "training time (s)": result.train_seconds,
    }


def _published(out: Path, inputs: str) -> SFTResult | None:
    """The result recorded in ``out`` when it was trained from the same inputs; its model is
    ``out`` (the record keeps the folder it was trained in, a copied run's included)."""
    try:
        record = json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if record.get("inputs_digest") != inputs:
        return None
    return SFTResult(**{**record, "model": str(out)})


def plot_losses(records: list[dict], heldout: dict[str, float | None], path: Path) -> Path | None:
    """loss.png: the training loss per step, and held-out loss before/after when measured."""
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot([r["step"] for r in records], [r["loss"] for r in records], label="training loss")
    before, after = heldout.get("before"), heldout.get("after")
    if before is not None and after is not None:
        last = records[-1]["step"]
        ax.plot([0, last], [before, after], "o--", label="held-out loss (before, after)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (assistant tokens)")
    ax.set_title("SFT loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
