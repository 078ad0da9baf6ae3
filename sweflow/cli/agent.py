"""``sweflow collect`` and ``sweflow infer``: agent runs over a dataset's built environments."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sweflow.cli.common import (
    BackendOption,
    RayOption,
    cli_executor,
    console,
    folder_or_new,
    option_group,
    positive,
    work_starts,
)
from sweflow.cli.env import (
    CliError,
    DatasetArgs,
    build_with_progress,
    dataset_options,
    print_retries,
)

if TYPE_CHECKING:
    from sweflow.agent import AgentConfig, Batch, ModelConfig, Trajectory
    from sweflow.agent.executor_batch import ExecutorBatch
    from sweflow.agent.jobs import JobSummary
    from sweflow.cluster.base import Executor
    from sweflow.envcache.builder import EnvBuilder
    from sweflow.instances import Instance

ModelUrlOption = typer.Option(None, "--model-url", help="OpenAI-compatible base URL (…/v1).")
ModelOption = typer.Option(None, "--model", "-m", help="Model name at that endpoint.")
ApiKeyOption = typer.Option("EMPTY", "--api-key", envvar="OPENAI_API_KEY", help="API key.")
OutOption = typer.Option(
    ..., "--out", "-o", help="Output folder (re-running resumes it).", callback=folder_or_new
)
AgentConfigOption = typer.Option(
    None, "--agent-config", help="YAML of AgentConfig (prompts, limits); flags override it."
)
ToolModeOption = typer.Option(
    None, "--tool-mode", help="tools (OpenAI tool calls) or text (one bash block a reply)."
)
MaxStepsOption = typer.Option(None, "--max-steps", help="Model calls per run.")
TemperatureOption = typer.Option(None, "--temperature", help="Sampling temperature.")
MaxTokensOption = typer.Option(None, "--max-tokens", help="Completion tokens per model call.")
ConcurrencyOption = typer.Option(
    8, "--concurrency", "-c", help="Runs (open sandboxes) at once.", callback=positive
)


def build_dataset(
    builder: EnvBuilder, rows: list[Instance], executor: Executor | None = None
) -> list[Instance]:
    """Build what is missing of ``rows``; rows whose build failed are reported, left out."""
    results = build_with_progress(builder, rows, executor)
    failed = {r.instance_id: r for r in results if r.status == "error"}
    for r in failed.values():
        console.print(f"[yellow]skipped (build failed):[/] {r.instance_id}: {r.error}")
    return [row for row in rows if row.instance_id not in failed]


Job = Callable[["Batch | ExecutorBatch"], Coroutine[Any, Any, "JobSummary"]]


def run_job(
    title: str,
    total: int,
    model: ModelConfig | None,
    batch_options: dict[str, Any],
    job: Job,
    executor: Executor | None = None,
) -> JobSummary:
    """Run ``job`` with a progress bar: on a Batch of ``batch_options`` whose runs share one
    client when ``model`` is given (a teacher such as replay has one per run instead), or, on
    ``executor``, on an ExecutorBatch whose runs are its work items."""
    from sweflow.sandbox.tracking import run_interruptible

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

        if executor is not None:
            return run_interruptible(job(executor_batch(batch_options, model, executor, on_done)))
        return run_interruptible(_local_batch(job, batch_options, model, on_done))


async def _local_batch(job: Job, options: dict[str, Any], model, on_done) -> JobSummary:
    from sweflow.agent import Batch, ModelClient
    from sweflow.agent.batch import grade_with

    client = ModelClient(model) if model else None
    grader = options.pop("grader", None)
    grade = grade_with(grader) if grader is not None else None
    try:
        return await job(Batch(client=client, on_done=on_done, grade=grade, **options))
    finally:
        if client is not None:
            await client.close()


def executor_batch(options: dict[str, Any], model, executor: Executor, on_done) -> ExecutorBatch:
    """The ExecutorBatch of the Batch options ``prepare`` and the commands set."""
    from sweflow.agent.executor_batch import ExecutorBatch, RolloutWork

    work = RolloutWork(
        options["agent"],
        options["backend"],
        model,
        options.get("client_for"),
        options.get("grader"),
    )
    return ExecutorBatch(work, executor, options["out_dir"], options.get("rollouts", 1), on_done)


def print_summary(title: str, summary: JobSummary) -> None:
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
    for instance_id, why in summary.skipped.items():
        console.print(f"[yellow]skipped (no imitable path):[/] {instance_id}: {why}",
                      highlight=False)  # fmt: skip
    if summary.imitable_fraction is not None:
        console.print(
            f"imitable fraction of the kept runs: {summary.imitable_fraction:.3f} (their steps "
            "that open, edit, run or search files resting on what they had seen)",
            highlight=False,
        )
    for name, path in summary.outputs.items():
        console.print(f"{name}: {path}", highlight=False)


@dataclass(frozen=True)
class AgentRunArgs:
    """The model and agent options that ``collect`` and ``infer`` share."""

    model_url: str = field(metadata={"option": ModelUrlOption})
    model: str = field(metadata={"option": ModelOption})
    api_key: str = field(metadata={"option": ApiKeyOption})
    out: Path = field(metadata={"option": OutOption})
    concurrency: int = field(metadata={"option": ConcurrencyOption})
    agent_config_path: Path | None = field(metadata={"option": AgentConfigOption})
    tool_mode: str | None = field(metadata={"option": ToolModeOption})
    max_steps: int | None = field(metadata={"option": MaxStepsOption})
    temperature: float | None = field(metadata={"option": TemperatureOption})
    max_tokens: int | None = field(metadata={"option": MaxTokensOption})
    backend: str = field(metadata={"option": BackendOption})
    ray: str | None = field(metadata={"option": RayOption})

    def agent_config(self) -> AgentConfig:
        """The ``--agent-config`` YAML with the flags over it."""
        import yaml
        from pydantic import ValidationError

        from sweflow.agent import AgentConfig

        path = self.agent_config_path
        data: dict[str, Any] = (yaml.safe_load(path.read_text()) or {}) if path else {}
        if self.tool_mode:
            data["tool_mode"] = self.tool_mode
        if self.max_steps:
            data["max_steps"] = self.max_steps
        try:
            return AgentConfig.model_validate(data)
        except ValidationError as exc:
            raise CliError(f"agent config: {exc}") from None

    def model_config(self) -> ModelConfig:
        """The endpoint, with the sampling flags that were given."""
        from sweflow.agent import ModelConfig

        if not (self.model_url and self.model):
            raise CliError("give the model's endpoint: --model-url URL and --model NAME")
        config = ModelConfig(base_url=self.model_url, model=self.model, api_key=self.api_key)
        if self.temperature is not None:
            config.temperature = self.temperature
        if self.max_tokens is not None:
            config.max_tokens = self.max_tokens
        return config

    def prepare(
        self, data: DatasetArgs, work: str
    ) -> tuple[EnvBuilder, list[Instance], dict[str, Any]]:
        """Check the agent config and the dataset; then, the ``work`` starting, build the
        dataset (on the cluster with ``--ray``): builder, usable rows, Batch options (and the
        executor, None without ``--ray``)."""
        from sweflow.envcache.builder import instance_sandbox_spec

        agent = self.agent_config()  # fail before any build
        rows = data.rows()
        work_starts(f"build {len(rows)} instance(s) in {data.store}, then {work} into {self.out}")
        builder = data.builder()
        executor = cli_executor(self.ray, data.store) if self.ray else None
        rows = build_dataset(builder, rows, executor)
        options = dict(
            agent=agent,
            out_dir=self.out,
            spec_for=lambda row: instance_sandbox_spec(builder.store, row.instance_id),
            max_open_sandboxes=self.concurrency,
            backend=self.backend,
            executor=executor,
        )
        return builder, rows, options

    def run(
        self, title: str, total: int, options: dict[str, Any], job: Job, model: ModelConfig | None
    ) -> None:
        """Run ``job`` (see :func:`run_job`) and print its summary."""
        executor = options.pop("executor")
        summary = run_job(title, total, model, options, job, executor)
        print_summary(f"sweflow {title}", summary)
        if executor is not None:
            print_retries(executor)
            console.print(executor.describe(), highlight=False)


agent_run_options = option_group(AgentRunArgs)


@dataset_options
@agent_run_options
def collect_command(
    data: DatasetArgs,
    agent: AgentRunArgs,
    rollouts: int = typer.Option(1, "--rollouts", "-k", help="Runs per task.", callback=positive),
    graders: int = typer.Option(
        2, "--graders", help="Gradings at once (they run test suites).", callback=positive
    ),
    teacher: str = typer.Option(
        "endpoint",
        "--teacher",
        help="endpoint: the model at --model-url; replay: each task's gold patch, found by "
        "the clues a student has (the issue, tracebacks, searches) and made through the "
        "agent's tools (no model needed; a task no clue leads through is skipped).",
    ),
    tamper_guard: bool = typer.Option(
        True,
        "--tamper-guard/--no-tamper-guard",
        help="Refuse runs whose patch passes the tests without fixing anything (edits tests or "
        "their settings, hides paths, reaches into the test runner): they never become data.",
    ),
) -> None:
    """Golden trajectories: K graded runs per task; resolved runs become the SFT dataset.

    Examples:
      sweflow collect -d data/demo/tasks.jsonl -s store --teacher replay --tool-mode text -o out
      sweflow collect -d tasks.jsonl -s store --model-url http://127.0.0.1:8000/v1 -m m -o out
    """
    from sweflow.agent.jobs import collect
    from sweflow.grading import Grader

    if teacher not in ("endpoint", "replay"):
        raise CliError(f"--teacher {teacher!r}: choose endpoint or replay")
    model = agent.model_config() if teacher == "endpoint" else None  # checked before the build
    builder, rows, options = agent.prepare(data, f"collect {rollouts} {teacher} run(s) a task")
    if teacher == "replay":
        rows = _replayable(rows, builder, options)
    log_dir = agent.out / "grading"
    grader = Grader(builder.options.store, builder.specs, backend=agent.backend, log_dir=log_dir,
                    tamper_guard=tamper_guard)  # fmt: skip
    options.update(rollouts=rollouts, max_grading=graders, grader=grader)
    agent.run("collect", len(rows) * rollouts, options, lambda b: collect(rows, b), model)


def _replayable(
    rows: list[Instance], builder: EnvBuilder, options: dict[str, Any]
) -> list[Instance]:
    """Set the batch up to replay each row's gold patch; rows that cannot be are named, left out."""
    from sweflow.agent.replay import replay_clients

    agent = options["agent"]
    client_for, skipped = replay_clients(rows, agent.tool_mode, builder.specs, agent.max_steps)
    for why in skipped.values():
        console.print(f"[yellow]skipped (cannot replay):[/] {why}", highlight=False)
    options["client_for"] = client_for
    return [row for row in rows if row.instance_id not in skipped]


@dataset_options
@agent_run_options
def infer_command(data: DatasetArgs, agent: AgentRunArgs) -> None:
    """Batch inference: one run per task; writes preds.json (swebench format) + trajectories.

    Examples:
      sweflow infer -d tasks.jsonl -s store --model-url http://127.0.0.1:8000/v1 -m m -o out
      sweflow infer -d tasks.jsonl -s store --model-url http://HOST:8000/v1 -m m -o out --ray auto
    """
    from sweflow.agent.jobs import infer

    model = agent.model_config()  # checked before the build
    _, rows, options = agent.prepare(data, f"run {model.model} on each task")
    agent.run("infer", len(rows), options, lambda b: infer(rows, b, model.model), model)


@dataset_options
def correct_command(
    data: DatasetArgs,
    runs: Path = typer.Argument(
        ...,
        help="The student's runs: a collect or infer output folder (trajectories/TASK/run-K.json).",
        exists=True,
        file_okay=False,
    ),
    out: Path = OutOption,
    backend: str = BackendOption,
) -> None:
    """The replay teacher's corrections of a student's own runs (DAgger), as SFT data.

    A student fine-tuned on golden trajectories has only seen states the teacher reached. For each
    state of each run before its first edit, the teacher says what it would do next from what that
    run has seen; where the student did otherwise, the conversation so far (its replies untrained,
    "weight": 0) plus the teacher's reply is one record of OUT/corrections.jsonl. Train the next
    round on the golden trajectories and the corrections together.

    Examples:
      sweflow correct runs/infer -d data/demo/tasks.jsonl -s store -o runs/corrections
    """
    from sweflow.agent.jobs import corrected_tasks, replay_corrections
    from sweflow.agent.trajectory import load_runs

    student = load_runs(runs)
    if not student:
        raise CliError(f"{runs}: no runs in it (trajectories/TASK/run-K.json)")
    rows = corrected_tasks(student, data.rows())
    work_starts(f"label {len(student)} run(s) of {len(rows)} task(s) into {out}")
    rows = build_dataset(data.builder(), rows)
    built = {row.instance_id for row in rows}
    kept = [r for r in student if r.instance_id in built]
    path = out / "corrections.jsonl"
    with console.status(f"the teacher labels {len(kept)} run(s)"):
        count = replay_corrections(kept, rows, store=data.store, out=path, backend=backend)
    table = Table(title="sweflow correct")
    for column in ("tasks", "runs", "corrections"):
        table.add_column(column, justify="right")
    table.add_row(str(len(rows)), str(len(kept)), str(count))
    console.print(table)
    console.print(f"corrections: {path}", highlight=False)
