"""``sweflow collect`` and ``sweflow infer``: agent runs over a dataset's built environments."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

import typer
from rich.table import Table

from sweflow.cli.common import (
    BackendOption,
    ExecutorOption,
    cli_executor,
    console,
    folder_or_new,
    non_negative,
    option_group,
    positive,
    progress_bar,
    work_starts,
)
from sweflow.cli.datasets import (
    CliError,
    DatasetArgs,
    dataset_options,
    print_retries,
)
from sweflow.cli.samples import SampleArgs, print_samples

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from sweflow.agent import AgentConfig, ModelConfig, Trajectory
    from sweflow.agent.runs.batch import Batch
    from sweflow.agent.runs.executor_batch import ExecutorBatch
    from sweflow.agent.runs.jobs import JobSummary
    from sweflow.agent.runs.plan import Job, RunPlan
    from sweflow.cluster.base import Executor
    from sweflow.envcache.dataset import Dataset
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
MaxStepsOption = typer.Option(None, "--max-steps", help="Model calls per run.", callback=positive)
TemperatureOption = typer.Option(
    None, "--temperature", help="Sampling temperature (0: greedy).", callback=non_negative
)
MaxTokensOption = typer.Option(
    None, "--max-tokens", help="Completion tokens per model call.", callback=positive
)
ConcurrencyOption = typer.Option(
    8, "--concurrency", "-c", help="Runs (open sandboxes) at once.", callback=positive
)


def run_job(
    title: str, total: int, plan: RunPlan, job: Job, executor: Executor | None = None
) -> JobSummary:
    """Run ``job`` on the plan's runs with a progress bar; on ``executor`` (``--executor``) each run
    is a work item on a node."""
    from sweflow.agent.runs.plan import run_plan
    from sweflow.sandbox.tracking import run_interruptible

    counts = {"resolved": 0, "submitted": 0}
    with progress_bar() as bar:
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

        return run_interruptible(run_plan(plan, job, executor=executor, on_done=on_done))


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
        console.print(
            f"[yellow]skipped (no imitable path):[/] {instance_id}: {why}", highlight=False
        )
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
    executor_name: str | None = field(metadata={"option": ExecutorOption})

    def agent_config(self) -> AgentConfig:
        """The ``--agent-config`` YAML with the flags over it."""
        import yaml
        from pydantic import ValidationError

        from sweflow.agent import AgentConfig

        path = self.agent_config_path
        data: dict[str, Any] = (yaml.safe_load(path.read_text()) or {}) if path else {}
        if self.tool_mode:
            data["tool_mode"] = self.tool_mode
        if self.max_steps is not None:
            data["max_steps"] = self.max_steps
        try:
            return AgentConfig.model_validate(data)
        except ValidationError as exc:
            raise CliError(f"agent config: {exc}") from None

    def model_config(self) -> ModelConfig:
        """The endpoint, with the sampling flags that were given."""
        from pydantic import ValidationError

        from sweflow.agent import ModelConfig
        from sweflow.configfile import describe

        if not (self.model_url and self.model):
            raise CliError("give the model's endpoint: --model-url URL and --model NAME")
        sampling = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        try:
            return ModelConfig(
                base_url=self.model_url,
                model=self.model,
                api_key=self.api_key,
                **{k: v for k, v in sampling.items() if v is not None},
            )
        except ValidationError as exc:
            raise CliError(f"model options: {describe(exc)}") from None

    def prepare(
        self, data: DatasetArgs, work: str
    ) -> tuple[Dataset, list[Instance], RunPlan, Executor | None]:
        """Check the agent config and the dataset; then, the ``work`` starting, build the
        dataset (where ``--executor`` says): the dataset, its usable rows, the plan of their runs
        (agent, output, store, backend, concurrency) and the executor (None without
        ``--executor``)."""
        from sweflow.agent.runs.plan import RunPlan

        agent = self.agent_config()  # fail before any build
        dataset = data.load()
        rows = dataset.rows
        work_starts(f"build {len(rows)} instance(s) in {data.store}, then {work} into {self.out}")
        executor = cli_executor(self.executor_name, data.store) if self.executor_name else None
        rows = data.build(dataset, rows, executor)
        plan = RunPlan(
            agent=agent,
            out_dir=self.out,
            store=data.store.absolute(),
            backend=self.backend,
            max_open_sandboxes=self.concurrency,
        )
        return dataset, rows, plan, executor

    def run(
        self, title: str, total: int, plan: RunPlan, job: Job, executor: Executor | None
    ) -> None:
        """Run ``job`` (see :func:`run_job`) and print its summary."""
        summary = run_job(title, total, plan, job, executor)
        print_summary(f"sweflow {title}", summary)
        if executor is not None:
            print_retries(executor)
            console.print(executor.describe(), highlight=False)


agent_run_options = option_group(AgentRunArgs)


def _teacher_edits(value: str) -> str:
    """``--teacher-edits``, checked before any work against the replay teacher's own choices."""
    from sweflow.agent.config import TeacherEdits

    if value not in get_args(TeacherEdits):
        raise typer.BadParameter(f"{value!r}: choose {' or '.join(get_args(TeacherEdits))}")
    return value


TeacherEditsOption = typer.Option(
    "str_replace",
    "--teacher-edits",
    help="The editor command the replay teacher's edits use: str_replace (the old text quoted) "
    "or replace_lines (the old text named by the line numbers its views showed).",
    callback=_teacher_edits,
)


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
    teacher_edits: str = TeacherEditsOption,
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
    from sweflow.agent.config import TeacherEdits
    from sweflow.agent.runs.jobs import collect
    from sweflow.agent.teacher.replay import replay_clients
    from sweflow.grading import Grader

    if teacher not in ("endpoint", "replay"):
        raise CliError(f"--teacher {teacher!r}: choose endpoint or replay")
    model = agent.model_config() if teacher == "endpoint" else None  # checked before the build
    work = f"collect {rollouts} {teacher} run(s) a task"
    dataset, rows, plan, executor = agent.prepare(data, work)
    client_for = None
    if teacher == "replay":  # a client per run replays its gold patch; rows it cannot, left out
        mode, steps = plan.agent.tool_mode, plan.agent.max_steps
        edits = cast(TeacherEdits, teacher_edits)  # checked by its option
        client_for, skipped = replay_clients(rows, mode, dataset.specs, steps, edits)
        for why in skipped.values():
            console.print(f"[yellow]skipped (cannot replay):[/] {why}", highlight=False)
        rows = [row for row in rows if row.instance_id not in skipped]
    log_dir = agent.out / "grading"
    grader = Grader(
        data.store,
        dataset.specs,
        backend=agent.backend,
        log_dir=log_dir,
        tamper_guard=tamper_guard,
    )
    plan = replace(
        plan,
        model=model,
        client_for=client_for,
        grader=grader,
        rollouts=rollouts,
        max_grading=graders,
    )
    agent.run("collect", len(rows) * rollouts, plan, lambda b: collect(rows, b), executor)


sample_options = option_group(SampleArgs)


@dataset_options
@agent_run_options
@sample_options
def infer_command(data: DatasetArgs, agent: AgentRunArgs, sampling: SampleArgs) -> None:
    """Batch inference: N samples per task; writes preds.json (swebench format) + trajectories.

    With --samples N above 1 every sample is drawn at --temperature with its own seed and
    graded; each selector picks one per task (--predict names whose picks become preds.json),
    and OUT/samples.json holds pass@k for k = 1..N, best-of-N per selector and oracle pass@N.
    A re-run resumes sample by sample.

    Examples:
      sweflow infer -d tasks.jsonl -s store --model-url http://127.0.0.1:8000/v1 -m m -o out
      sweflow infer -d tasks.jsonl -s store --model-url URL -m m -o out --samples 8 --temperature 1
      sweflow infer -d tasks.jsonl -s s --model-url http://H:8000/v1 -m m -o o --executor ray:auto
    """
    from sweflow.agent.runs.jobs import infer
    from sweflow.grading import Grader

    model = agent.model_config()  # checked before the build
    drawn = sampling.check(model, agent.out)
    work = f"run {model.model} on each task" + (f", {sampling.samples} samples" if drawn else "")
    dataset, rows, plan, executor = agent.prepare(data, work)
    plan = replace(plan, model=model)
    selection = None
    if drawn is not None:
        grader = Grader(
            plan.store,
            dataset.specs,
            backend=agent.backend,
            log_dir=agent.out / "grading",
            tamper_guard=sampling.tamper_guard,
        )
        plan = replace(
            plan,
            grader=grader,
            rollouts=sampling.samples,
            sampling=drawn,
            max_grading=sampling.graders,
        )
        selection = sampling.selection(model, plan.store, agent.backend, dataset.specs)

    def job(batch: Batch | ExecutorBatch) -> Awaitable[JobSummary]:
        return infer(rows, batch, model.model, selection, progress=_selector_line)

    agent.run("infer", len(rows) * plan.rollouts, plan, job, executor)
    if selection is not None:
        print_samples(agent.out / "samples.json")


def _selector_line(line: str, done: int = 0, total: int = 0) -> None:
    console.print(f"[dim]{line}[/]", highlight=False)


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
    teacher_edits: str = TeacherEditsOption,
) -> None:
    """The replay teacher's corrections of a student's own runs (DAgger), as SFT data.

    A student fine-tuned on golden trajectories has only seen states the teacher reached. For each
    state of each run before its first edit, the teacher says what it would do next from what that
    run has seen; where the student did otherwise, the conversation so far (its replies untrained,
    "weight": 0) plus the teacher's reply is one record of OUT/corrections.jsonl. Train the next
    round on the golden trajectories and the corrections together; give --teacher-edits the value
    the golden runs were collected with, so that both teach one editor command.

    Examples:
      sweflow correct runs/infer -d data/demo/tasks.jsonl -s store -o runs/corrections
      sweflow correct runs/infer -d data/demo/tasks.jsonl -s s -o out --teacher-edits replace_lines
    """
    from sweflow.agent.config import TeacherEdits
    from sweflow.agent.runs.jobs import corrected_tasks, replay_corrections
    from sweflow.agent.trajectory import load_runs

    student = load_runs(runs)
    if not student:
        raise CliError(f"{runs}: no runs in it (trajectories/TASK/run-K.json)")
    dataset = data.load()
    rows = corrected_tasks(student, dataset.rows)
    work_starts(f"label {len(student)} run(s) of {len(rows)} task(s) into {out}")
    rows = data.build(dataset, rows)
    built = {row.instance_id for row in rows}
    kept = [r for r in student if r.instance_id in built]
    path = out / "corrections.jsonl"
    with console.status(f"the teacher labels {len(kept)} run(s)"):
        edits = cast(TeacherEdits, teacher_edits)  # checked by its option
        count = replay_corrections(
            kept, rows, store=data.store, out=path, backend=backend, edits=edits
        )
    table = Table(title="sweflow correct")
    for column in ("tasks", "runs", "corrections"):
        table.add_column(column, justify="right")
    table.add_row(str(len(rows)), str(len(kept)), str(count))
    console.print(table)
    console.print(f"corrections: {path}", highlight=False)
