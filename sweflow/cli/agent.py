"""``sweflow collect`` and ``sweflow infer``: agent runs over a dataset's built environments."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig, Trajectory
from sweflow.agent.runner import Grade, reward_dict
from sweflow.agent.stages import StageSummary, collect, infer
from sweflow.cli.common import BackendOption, console
from sweflow.cli.env import CliError, DatasetArgs, build_with_progress, dataset_options
from sweflow.envcache.builder import EnvBuilder, instance_sandbox_spec
from sweflow.instances import Instance

ModelUrlOption = typer.Option(..., "--model-url", help="OpenAI-compatible base URL (…/v1).")
ModelOption = typer.Option(..., "--model", "-m", help="Model name at that endpoint.")
ApiKeyOption = typer.Option("EMPTY", "--api-key", envvar="OPENAI_API_KEY", help="API key.")
OutOption = typer.Option(..., "--out", "-o", help="Output folder (re-running resumes it).")
AgentConfigOption = typer.Option(
    None, "--agent-config", help="YAML of AgentConfig (prompts, limits); flags override it."
)
ToolModeOption = typer.Option(
    None, "--tool-mode", help="tools (OpenAI tool calls) or text (one bash block a reply)."
)
MaxStepsOption = typer.Option(None, "--max-steps", help="Model calls per run.")
TemperatureOption = typer.Option(None, "--temperature", help="Sampling temperature.")
MaxTokensOption = typer.Option(None, "--max-tokens", help="Completion tokens per model call.")
ConcurrencyOption = typer.Option(8, "--concurrency", "-c", help="Runs (open sandboxes) at once.")


def agent_config(path: Path | None, tool_mode: str | None, max_steps: int | None) -> AgentConfig:
    data: dict[str, Any] = (yaml.safe_load(path.read_text()) or {}) if path else {}
    if tool_mode:
        data["tool_mode"] = tool_mode
    if max_steps:
        data.setdefault("limits", {})["max_steps"] = max_steps
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise CliError(f"agent config: {exc}") from None


def build_dataset(data: DatasetArgs) -> tuple[EnvBuilder, list[Instance]]:
    """Load the rows and build what is missing; rows whose build failed are reported, left out."""
    rows = data.rows()
    builder = data.builder()
    results = build_with_progress(builder, rows)
    failed = {r.instance_id: r for r in results if r.status == "error"}
    for r in failed.values():
        console.print(f"[yellow]skipped (build failed):[/] {r.instance_id}: {r.error}")
    return builder, [row for row in rows if row.instance_id not in failed]


def run_stage(
    title: str,
    total: int,
    model: ModelConfig,
    batch_options: dict[str, Any],
    stage: Callable[[Batch], Coroutine[Any, Any, StageSummary]],
) -> StageSummary:
    """Run ``stage`` on a Batch of ``batch_options`` with one shared client and a progress bar."""
    counts = {"resolved": 0, "submitted": 0}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(title, total=total)

        def on_done(traj: Trajectory, resumed: bool) -> None:
            counts["resolved"] += traj.resolved
            counts["submitted"] += traj.exit_status == "submitted"
            note = "resumed" if resumed else traj.exit_status
            bar.update(
                task,
                advance=1,
                description=f"{title}: {note} {traj.instance_id} "
                f"(submitted {counts['submitted']}, resolved {counts['resolved']})",
            )

        async def go() -> StageSummary:
            client = ModelClient(model)
            try:
                return await stage(Batch(client=client, on_done=on_done, **batch_options))
            finally:
                await client.close()

        return asyncio.run(go())


def model_config(
    url: str, model: str, api_key: str, temperature: float | None, max_tokens: int | None
) -> ModelConfig:
    config = ModelConfig(base_url=url, model=model, api_key=api_key)
    if temperature is not None:
        config.temperature = temperature
    if max_tokens is not None:
        config.max_tokens = max_tokens
    return config


def print_summary(title: str, summary: StageSummary) -> None:
    table = Table(title=title)
    for column in ("tasks", "runs", "submitted", "resolved", "kept", "steps", "tokens"):
        table.add_column(column, justify="right")
    tokens = summary.prompt_tokens + summary.completion_tokens
    table.add_row(
        *map(str, (summary.tasks, summary.runs, summary.submitted, summary.resolved)),
        str(summary.kept),
        str(summary.steps),
        f"{tokens:,} ({summary.completion_tokens:,} out)",
    )
    console.print(table)
    statuses = ", ".join(f"{k}: {v}" for k, v in summary.exit_statuses.items())
    console.print(f"exit statuses: {statuses}", highlight=False)
    for name, path in summary.outputs.items():
        console.print(f"{name}: {path}", highlight=False)


def make_grade(builder: EnvBuilder, backend: str, log_dir: Path) -> Grade:
    from sweflow.grading import Grader

    grader = Grader(builder.options.store, builder.specs, backend=backend, log_dir=log_dir)

    async def grade(instance: Instance, patch: str) -> dict[str, Any]:
        return reward_dict(await grader.areward(instance, patch))

    return grade


@dataset_options
def collect_command(
    data: DatasetArgs,
    model_url: str = ModelUrlOption,
    model: str = ModelOption,
    api_key: str = ApiKeyOption,
    out: Path = OutOption,
    rollouts: int = typer.Option(1, "--rollouts", "-k", help="Runs per task."),
    concurrency: int = ConcurrencyOption,
    graders: int = typer.Option(2, "--graders", help="Gradings at once (they run test suites)."),
    agent_config_path: Path = AgentConfigOption,
    tool_mode: str = ToolModeOption,
    max_steps: int = MaxStepsOption,
    temperature: float = TemperatureOption,
    max_tokens: int = MaxTokensOption,
    backend: str = BackendOption,
) -> None:
    """Golden trajectories: K graded runs per task; resolved runs become the SFT dataset."""
    agent = agent_config(agent_config_path, tool_mode, max_steps)  # fail before any build
    builder, rows = build_dataset(data)
    options = dict(
        agent=agent,
        out_dir=out,
        spec_for=lambda row: instance_sandbox_spec(builder.store, row.instance_id),
        rollouts=rollouts,
        max_open_sandboxes=concurrency,
        max_grading=graders,
        backend=backend,
        grade=make_grade(builder, backend, out / "grading"),
    )
    summary = run_stage(
        "collect",
        len(rows) * rollouts,
        model_config(model_url, model, api_key, temperature, max_tokens),
        options,
        lambda batch: collect(rows, batch),
    )
    print_summary("sweflow collect", summary)


@dataset_options
def infer_command(
    data: DatasetArgs,
    model_url: str = ModelUrlOption,
    model: str = ModelOption,
    api_key: str = ApiKeyOption,
    out: Path = OutOption,
    concurrency: int = ConcurrencyOption,
    agent_config_path: Path = AgentConfigOption,
    tool_mode: str = ToolModeOption,
    max_steps: int = MaxStepsOption,
    temperature: float = TemperatureOption,
    max_tokens: int = MaxTokensOption,
    backend: str = BackendOption,
) -> None:
    """Batch inference: one run per task; writes preds.json (swebench format) + trajectories."""
    agent = agent_config(agent_config_path, tool_mode, max_steps)  # fail before any build
    builder, rows = build_dataset(data)
    options = dict(
        agent=agent,
        out_dir=out,
        spec_for=lambda row: instance_sandbox_spec(builder.store, row.instance_id),
        max_open_sandboxes=concurrency,
        backend=backend,
    )
    summary = run_stage(
        "infer",
        len(rows),
        model_config(model_url, model, api_key, temperature, max_tokens),
        options,
        lambda batch: infer(rows, batch, model),
    )
    print_summary("sweflow infer", summary)
