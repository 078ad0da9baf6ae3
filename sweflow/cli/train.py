"""``sweflow train sft`` (torchtune on golden trajectories) and ``sweflow train rl`` (on-policy
RL on the agent's own sandboxed, graded episodes)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sweflow.cli.common import (
    App,
    BackendOption,
    console,
    folder_or_new,
    model_ref,
    work_starts,
)
from sweflow.cli.env import DatasetArgs, dataset_options
from sweflow.training.rl.backends import DEFAULT_RL_BACKEND, rl_backends_help

train_app = App(help="Train models: SFT with torchtune, RL on sandboxed rewards (TRL or verl).")
ModelRefOption = typer.Option(
    "smollm2-135m-instruct",
    "--model",
    "-m",
    help="A Hugging Face folder, a bundled model name, or a Hub id: org/name or org/name@revision.",
    callback=model_ref,
)
RunFolderOption = typer.Option(
    ..., "--out", "-o", help="Run folder; the model goes to OUT/model.", callback=folder_or_new
)


@train_app.command("sft")
def train_sft_command(
    data: Path = typer.Option(..., "--data", help="sft.jsonl from `sweflow collect`."),
    model: str = ModelRefOption,
    out: Path = RunFolderOption,
    method: str = typer.Option("full", "--method", help="full or lora."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the data."),
    learning_rate: float = typer.Option(2e-5, "--lr", help="AdamW learning rate."),
    batch_size: int = typer.Option(1, "--batch-size", help="Sequences per step."),
    max_seq_len: int = typer.Option(2048, "--max-seq-len", help="Tokens per sequence."),
    max_steps: int = typer.Option(None, "--max-steps", help="Steps per epoch (default: all)."),
    heldout: float = typer.Option(
        0.0, "--heldout", help="Fraction of tasks kept out to measure loss before/after."
    ),
    settings: list[str] = typer.Option(
        [], "--set", help="Any SFTConfig field, e.g. --set lora_rank=16 --set dtype=bf16."
    ),
) -> None:
    """Fine-tune MODEL on DATA with torchtune's own recipe; serve OUT/model with `sweflow serve`.

    Examples:
      sweflow train sft --data runs/collect/sft.jsonl -o runs/sft
      sweflow train sft --data sft.jsonl -m Qwen/Qwen2.5-0.5B-Instruct --method lora -o runs/q
    """
    from pydantic import ValidationError

    from sweflow.configfile import apply_overrides, describe
    from sweflow.errors import ConfigError
    from sweflow.serving import resolve_model
    from sweflow.training.sft.config import SFTConfig
    from sweflow.training.sft.train import train_sft

    fields = dict(method=method, epochs=epochs, learning_rate=learning_rate,
                  batch_size=batch_size, max_seq_len=max_seq_len, max_steps_per_epoch=max_steps,
                  heldout_fraction=heldout, model=model)  # fmt: skip
    try:
        config = SFTConfig(**apply_overrides(fields, settings, ConfigError))
    except ValidationError as exc:
        raise ConfigError(f"sft options: {describe(exc)}") from None
    if not data.is_file():
        raise ConfigError(f"--data {data}: no such file")
    work_starts(f"fine-tune {model} on {data} into {out}")
    with console.status(f"resolving model {model}"):
        base = resolve_model(model)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:  # fmt: skip
        task = bar.add_task("sft: preparing", total=None)

        def on_step(step: int, total: int, metrics: dict) -> None:
            bar.update(task, completed=step, total=total,
                       description=f"sft: loss {metrics['loss']:.4f}")  # fmt: skip

        result = train_sft(data, base, out, out / "model", config, base_name=model,
                           progress=on_step, log=lambda line: bar.console.log(line))  # fmt: skip
    table = Table(title="sweflow train sft")
    for column in ("examples", "steps", "final loss", "held-out loss", "tokens/s", "seconds"):
        table.add_column(column, justify="right")
    held = result.heldout_loss_before, result.heldout_loss_after
    table.add_row(
        str(result.data["examples"]),
        str(result.steps),
        f"{result.final_loss:.4f}" if result.final_loss is not None else "-",
        f"{held[0]:.4f} -> {held[1]:.4f}" if None not in held else "-",
        str(result.tokens_per_s or "-"),
        str(result.train_seconds),
    )
    console.print(table)
    skipped = {
        k: result.data[k] for k in ("truncated", "skipped_overlength", "skipped_drift", "left_out")
    }
    console.print(f"data: {result.data['lines']} lines, {skipped}", highlight=False)
    for line in result.data["malformed"]:
        console.print(f"[yellow]skipped:[/] {line}", highlight=False)
    for name in ("model", "recipe_config", "loss_plot", "tensorboard"):
        console.print(f"{name}: {getattr(result, name)}", highlight=False)


@train_app.command("rl")
@dataset_options
def train_rl_command(
    data: DatasetArgs,
    model: str = ModelRefOption,
    out: Path = RunFolderOption,
    rl_backend: str = typer.Option(
        DEFAULT_RL_BACKEND, "--rl-backend", help=f"RL trainer: {rl_backends_help()}."
    ),
    steps: int = typer.Option(4, "--steps", help="Policy updates."),
    tasks_per_step: int = typer.Option(2, "--tasks-per-step", help="Tasks in a step's batch."),
    rollouts: int = typer.Option(2, "--rollouts", help="Episodes per task (GRPO's group)."),
    learning_rate: float = typer.Option(1e-6, "--lr", help="Learning rate."),
    tool_mode: str = typer.Option("text", "--tool-mode", help="text or tools (the agent's)."),
    max_steps: int = typer.Option(10, "--max-steps", help="Agent turns per episode."),
    backend: str = BackendOption,
    settings: list[str] = typer.Option(
        [], "--set", help="Any RLConfig field, e.g. --set format_error_penalty=0.1."
    ),
) -> None:
    """RL on the dataset's tasks: each rollout an agent episode in a fresh sandbox, rewarded 1
    when its tests pass; the policy is updated on its own episodes. Serve OUT/model after.

    Examples:
      sweflow train rl -d data/demo/tasks.jsonl --store store/ -m runs/sft/model -o runs/rl
      sweflow train rl -d tasks.jsonl -s store -m Qwen/Qwen2.5-7B-Instruct --rl-backend verl -o v
    """
    from pydantic import ValidationError

    from sweflow.agent.config import AgentConfig
    from sweflow.cli.agent import build_dataset
    from sweflow.configfile import apply_overrides, describe
    from sweflow.errors import ConfigError
    from sweflow.serving import resolve_model
    from sweflow.training.rl.config import RLConfig
    from sweflow.training.rl.trainer import train

    fields = dict(backend=rl_backend, steps=steps, tasks_per_step=tasks_per_step,
                  rollouts_per_task=rollouts, learning_rate=learning_rate, model=model)  # fmt: skip
    try:
        config = RLConfig(**apply_overrides(fields, settings, ConfigError))
        agent = AgentConfig(tool_mode=tool_mode, max_steps=max_steps)
    except ValidationError as exc:
        raise ConfigError(f"rl options: {describe(exc)}") from None
    rows = data.rows()
    work_starts(f"build {len(rows)} instance(s) in {data.store}, then train {model} with "
                f"{rl_backend} for {steps} step(s) into {out}")  # fmt: skip
    with console.status(f"resolving model {model}"):
        policy = resolve_model(model)
    rows = build_dataset(data.builder(), rows)
    specs = data.specs_path()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:  # fmt: skip
        task = bar.add_task("rl: first rollouts", total=config.steps)

        def on_step(step: int, total: int, record) -> None:  # noqa: ANN001
            reward = "-" if record.mean_reward is None else f"{record.mean_reward:+.3f}"
            bar.update(task, completed=step, description=f"rl: reward {reward}, "
                       f"valid actions {record.valid_action_rate:.0%}")  # fmt: skip

        result = train(rows, policy, out, out / "model", config, store=data.store, specs=specs,
                       agent=agent, backend=backend, policy_name=model,
                       progress=on_step)  # fmt: skip
    table = Table(title=f"sweflow train rl ({result.backend})")
    columns = ("step", "reward", "resolved", "valid actions", "turns", "refused",
               "groups without spread", "groups redrawn", "infra failures", "generation s",
               "env s", "update s")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    cells = {"mean_reward": "{:+.3f}", "resolve_rate": "{:.0%}", "valid_action_rate": "{:.0%}",
             "episode_turns": "{:.1f}", "refused": "{}", "zero_spread_groups": "{:.0%}",
             "redrawn_groups": "{}", "infra_failures": "{}", "generation_s": "{:.1f}",
             "env_s": "{:.1f}", "update_s": "{:.1f}"}  # fmt: skip
    for r in result.records:  # "-": not measured (by this step, or by this backend)
        shown = ["-" if r.get(key) is None else cell.format(r[key]) for key, cell in cells.items()]
        table.add_row(str(r["step"]), *shown)
    console.print(table)
    for name in ("model", "curves", "tensorboard"):
        console.print(f"{name}: {getattr(result, name)}", highlight=False)
