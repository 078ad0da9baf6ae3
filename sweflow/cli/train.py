"""``sweflow train sft`` (torchtune on golden trajectories) and ``sweflow train rl`` (on-policy
RL on the agent's own sandboxed, graded episodes)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from sweflow.cli.common import (
    App,
    BackendOption,
    console,
    dry_running,
    folder_or_new,
    model_ref,
    positive,
    progress_bar,
    work_starts,
)
from sweflow.cli.datasets import DatasetArgs, dataset_options
from sweflow.cli.tracking import TrackingArgs, tracked_run, tracking_options
from sweflow.training.rl.backends import DEFAULT_RL_BACKEND, rl_backends_help

train_app = App(
    help="Train models: SFT with torchtune, RL on sandboxed rewards (TRL, verl or SkyRL)."
)
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


def _sources(values: list[str]) -> list[str]:
    """Each ``--data`` parsed and, when it names a file, found, before any work starts."""
    from sweflow.training.sft.sources.spec import missing_files, parse_source

    if not values:
        raise typer.BadParameter("give at least one --data")
    sources = [parse_source(value) for value in values]
    if missing := missing_files(sources):
        raise typer.BadParameter(f"no such file: {', '.join(missing)}")
    if any(s.source == "collect" for s in sources):
        raise typer.BadParameter("`collect` names a pipeline's trajectories; give their file")
    return values


@train_app.command("sft")
@tracking_options
def train_sft_command(
    data: list[str] = typer.Option(
        ...,
        "--data",
        help="Trajectories, repeatable (mixed): sft.jsonl from `sweflow collect`, a .jsonl/.json/"
        ".parquet file, or a Hugging Face id org/name[@revision][:split]; options after commas: "
        "count=N, weight=W, format=sweflow|swe-smith|swe-agent|openhands, resolved_only=false.",
        callback=_sources,
    ),
    model: str = ModelRefOption,
    out: Path = RunFolderOption,
    tool_mode: str = typer.Option(
        None,
        "--tool-mode",
        help="The student's tool mode (tools or text); every row is converted to it. Default: "
        "sweflow's rows keep their own, other formats become tools mode.",
    ),
    method: str = typer.Option("full", "--method", help="full or lora."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the data."),
    learning_rate: float = typer.Option(
        2e-5, "--lr", help="AdamW learning rate.", callback=positive
    ),
    batch_size: int = typer.Option(1, "--batch-size", help="Sequences per step."),
    max_seq_len: int = typer.Option(2048, "--max-seq-len", help="Tokens per sequence."),
    max_steps: int = typer.Option(None, "--max-steps", help="Steps per epoch (default: all)."),
    heldout: float = typer.Option(
        0.0, "--heldout", help="Fraction of tasks kept out to measure loss before/after."
    ),
    nnodes: int = typer.Option(1, "--nnodes", help="Machines (torchtune's distributed recipe)."),
    nproc_per_node: int = typer.Option(
        1, "--nproc-per-node", help="Processes (GPUs) a machine; more than 1: distributed."
    ),
    settings: list[str] = typer.Option(
        [], "--set", help="Any SFTConfig field, e.g. --set lora_rank=16 --set dtype=bf16."
    ),
    *,
    tracking: TrackingArgs,
) -> None:
    """Fine-tune MODEL on DATA with torchtune's own recipe; serve OUT/model with `sweflow serve`.

    Examples:
      sweflow train sft --data runs/collect/sft.jsonl -o runs/sft
      sweflow train sft --data sft.jsonl -m Qwen/Qwen2.5-0.5B-Instruct --method lora -o runs/q
      sweflow train sft --data sft.jsonl -o runs/sft --mlflow sqlite:///runs/mlflow.db
      sweflow train sft --data SWE-bench/SWE-smith-trajectories:tool,count=500 -o runs/mix
    """
    from pydantic import ValidationError

    from sweflow.configfile import apply_overrides, describe
    from sweflow.errors import ConfigError
    from sweflow.serving import resolve_model
    from sweflow.training.sft.config import SFTConfig
    from sweflow.training.sft.sources.spec import parse_source
    from sweflow.training.sft.train import train_sft

    fields = dict(
        data=[parse_source(value).model_dump() for value in data],
        tool_mode=tool_mode,
        method=method,
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        max_seq_len=max_seq_len,
        max_steps_per_epoch=max_steps,
        heldout_fraction=heldout,
        nnodes=nnodes,
        gpus=nproc_per_node,
        model=model,
    )
    try:
        config = SFTConfig(**apply_overrides(fields, settings, ConfigError))
    except ValidationError as exc:
        raise ConfigError(f"sft options: {describe(exc)}") from None
    trackers = tracking.config()
    work_starts(f"fine-tune {model} on {', '.join(data)} into {out}")
    with console.status(f"resolving model {model}"):
        base = resolve_model(model)
    with tracked_run(trackers, f"train-sft {out.name}", out) as run, progress_bar() as bar:
        task = bar.add_task("sft: preparing", total=None)

        def on_step(step: int, total: int, metrics: dict) -> None:
            bar.update(
                task, completed=step, total=total, description=f"sft: loss {metrics['loss']:.4f}"
            )

        result = train_sft(
            None,
            base,
            out,
            out / "model",
            config,
            base_name=model,
            progress=on_step,
            log=lambda line: bar.console.log(line),
            tracking=run,
        )
    console.print(sources_table(result.sources))
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
    console.print(f"data: {result.data['lines']} conversations, {skipped}", highlight=False)
    for line in result.data["malformed"]:
        console.print(f"[yellow]skipped:[/] {line}", highlight=False)
    for name in ("model", "recipe_config", "loss_plot", "tensorboard", "data_report"):
        console.print(f"{name}: {getattr(result, name)}", highlight=False)


def sources_table(sources: list[dict]) -> Table:
    """Each --data source's rows: kept as they were, converted, refused (and why), taken."""
    table = Table(title="SFT data")
    columns = ("source", "format", "rows", "kept", "converted", "refused", "render refused")
    for column in (*columns, "taken", "why refused"):
        table.add_column(column, justify="left" if column in ("source", "why refused") else "right")
    for s in sources:
        why = "; ".join(f"{n}x {reason}" for reason, n in sorted(s["reasons"].items()))
        table.add_row(
            s["source"],
            ", ".join(s["formats"]) or "-",
            *(str(s[key]) for key in ("rows", "kept", "converted", "refused")),
            str(s["refused_rendering"]),
            str(s["selected"]),
            why or "-",
        )
    return table


@train_app.command("rl")
@dataset_options
@tracking_options
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
    learning_rate: float = typer.Option(1e-6, "--lr", help="Learning rate.", callback=positive),
    tool_mode: str = typer.Option("text", "--tool-mode", help="text or tools (the agent's)."),
    max_steps: int = typer.Option(10, "--max-steps", help="Agent turns per episode."),
    backend: str = BackendOption,
    settings: list[str] = typer.Option(
        [],
        "--set",
        help="Any RLConfig field, e.g. --set format_error_penalty=0.1, --set trl.rollout=hf or "
        "--set validation.tasks=[ID,...] --set validation.every=2.",
    ),
    verl_settings: list[str] = typer.Option(
        [],
        "--verl",
        help="Any verl setting in Hydra syntax (rl.verl.overrides), checked against verl's "
        "schema, e.g. --verl actor_rollout_ref.rollout.gpu_memory_utilization=0.5.",
    ),
    skyrl_settings: list[str] = typer.Option(
        [],
        "--skyrl",
        help="Any SkyRL setting in Hydra syntax (rl.skyrl.overrides), composed and checked by "
        "SkyRL before training, e.g. --skyrl generator.gpu_memory_utilization=0.5.",
    ),
    *,
    tracking: TrackingArgs,
) -> None:
    """RL on the dataset's tasks: each rollout an agent episode in a fresh sandbox, rewarded 1
    when its tests pass; the policy is updated on its own episodes. Serve OUT/model after.
    With rl.validation (--set validation.tasks=[ID,...]) those tasks are held out and their
    resolve rate measured with the current policy every validation.every steps. Under
    `sweflow --dry-run`, backends verl and skyrl show the config their trainer composes and
    its launch.sh.

    Examples:
      sweflow train rl -d data/demo/tasks.jsonl --store store/ -m runs/sft/model -o runs/rl
      sweflow train rl -d tasks.jsonl -s store -m Qwen/Qwen2.5-7B-Instruct --rl-backend verl -o v
    """
    from pydantic import ValidationError

    from sweflow.agent.config import AgentConfig
    from sweflow.configfile import apply_overrides, describe
    from sweflow.errors import ConfigError
    from sweflow.serving import resolve_model
    from sweflow.training.rl.config import RLConfig
    from sweflow.training.rl.trainer import train

    fields = dict(
        backend=rl_backend,
        steps=steps,
        tasks_per_step=tasks_per_step,
        rollouts_per_task=rollouts,
        learning_rate=learning_rate,
        model=model,
    )
    try:
        fields = apply_overrides(fields, settings, ConfigError)
        for section, extra in (("verl", verl_settings), ("skyrl", skyrl_settings)):
            if extra:
                given = fields.setdefault(section, {})
                given["overrides"] = [*given.get("overrides", []), *extra]
        config = RLConfig(**fields)
        agent = AgentConfig(tool_mode=tool_mode, max_steps=max_steps)
    except ValidationError as exc:
        raise ConfigError(f"rl options: {describe(exc)}") from None
    trackers = tracking.config()
    dataset = data.load()
    rows, val_rows = held_out(config, dataset.rows)
    if dry_running():
        show_launch_plan(config, model, out, validation=bool(val_rows), max_turns=max_steps)
    work_starts(
        f"build {len(rows)} instance(s) in {data.store}, then train {model} with "
        f"{rl_backend} for {steps} step(s) into {out}"
    )
    with console.status(f"resolving model {model}"):
        policy = resolve_model(model)
    built_ids = {row.instance_id for row in data.build(dataset, rows + val_rows)}
    rows = [row for row in rows if row.instance_id in built_ids]
    val_rows = [row for row in val_rows if row.instance_id in built_ids]
    with tracked_run(trackers, f"train-rl {out.name}", out) as run, progress_bar() as bar:
        task = bar.add_task("rl: first rollouts", total=config.steps)

        def on_step(step: int, total: int, record) -> None:  # noqa: ANN001
            reward = "-" if record.mean_reward is None else f"{record.mean_reward:+.3f}"
            bar.update(
                task,
                completed=step,
                description=f"rl: reward {reward}, valid actions {record.valid_action_rate:.0%}",
            )

        result = train(
            rows,
            policy,
            out,
            out / "model",
            config,
            store=data.store,
            specs=dataset.specs,
            agent=agent,
            backend=backend,
            policy_name=model,
            progress=on_step,
            tracking=run,
            val_tasks=val_rows,
        )
    table = Table(title=f"sweflow train rl ({result.backend})")
    columns = (
        "step",
        "reward",
        "resolved",
        "valid actions",
        "turns",
        "refused",
        "groups without spread",
        "groups redrawn",
        "infra failures",
        "generation s",
        "env s",
        "update s",
    )
    for column in columns:
        table.add_column(column, justify="right")
    cells = {
        "mean_reward": "{:+.3f}",
        "resolve_rate": "{:.0%}",
        "valid_action_rate": "{:.0%}",
        "episode_turns": "{:.1f}",
        "refused": "{}",
        "zero_spread_groups": "{:.0%}",
        "redrawn_groups": "{}",
        "infra_failures": "{}",
        "generation_s": "{:.1f}",
        "env_s": "{:.1f}",
        "update_s": "{:.1f}",
    }
    for r in result.records:  # "-": not measured (by this step, or by this backend)
        shown = ["-" if r.get(key) is None else cell.format(r[key]) for key, cell in cells.items()]
        table.add_row(str(r["step"]), *shown)
    console.print(table)
    if result.validation:
        console.print(validation_table(result.validation))
    for name in ("model", "curves", "tensorboard"):
        console.print(f"{name}: {getattr(result, name)}", highlight=False)


def held_out(config, rows: list) -> tuple[list, list]:  # noqa: ANN001
    """(train rows, validation rows): tasks named by ``rl.validation`` are held out of
    training; ``validation.tasks train`` measures the train tasks themselves."""
    from sweflow.errors import ConfigError
    from sweflow.training.rl.validation import pick

    if config.validation is None:
        return rows, []
    try:
        val_rows = pick(config.validation, rows, rows)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    held = {row.instance_id for row in val_rows} if config.validation.tasks != "train" else set()
    train_rows = [row for row in rows if row.instance_id not in held]
    if not train_rows:
        raise ConfigError("rl.validation.tasks names every task of the dataset: none left to train")
    return train_rows, val_rows


def show_launch_plan(config, model: str, out: Path, validation: bool, max_turns: int) -> None:  # noqa: ANN001
    """For a backend that launches an outside trainer (verl, SkyRL): the config that trainer
    would compose (by its own Hydra, where its environment exists) and the launch.sh sweflow
    would run."""
    import tempfile

    from rich.syntax import Syntax

    from sweflow.training.rl.backend import LaunchedBackend, rl_backend

    backend = rl_backend(config.backend)
    if not isinstance(backend, LaunchedBackend):
        return
    name, env = backend.trainer, backend.environment
    with tempfile.TemporaryDirectory() as scratch, console.status(f"composing {name}'s config"):
        composed, launch = backend.preview(
            config,
            model,
            out,
            validation=validation,
            compose_in=Path(scratch),
            max_turns=max_turns,
        )
    if composed is None:
        console.print(
            f"{name}'s environment (.venv-{env.name}) is not installed: its config was not "
            f"composed (bash scripts/setup-{env.name}.sh)",
            highlight=False,
        )
    else:
        console.print(f"{name}'s config, as {name} composes it:", highlight=False)
        console.print(Syntax(composed, "yaml", theme="ansi_dark"))
    console.print(f"{out / backend.folder / 'launch.sh'}:", highlight=False)
    console.print(Syntax(launch, "bash", theme="ansi_dark", word_wrap=True))


def validation_table(rows: list[dict]) -> Table:
    """rl.validation's measurements: pass@k per step."""
    ks = sorted({k for row in rows for k in row["pass_at"]}, key=int)
    table = Table(title="validation (current policy)")
    for column in ("step", "tasks", "episodes", "infra failures", *(f"pass@{k}" for k in ks)):
        table.add_column(column, justify="right")
    for row in rows:
        cells = [f"{row['pass_at'][k]:.0%}" if k in row["pass_at"] else "-" for k in ks]
        table.add_row(
            str(row["step"]),
            str(row["tasks"]),
            str(row["episodes"]),
            str(row["infra_failures"]),
            *cells,
        )
    return table
