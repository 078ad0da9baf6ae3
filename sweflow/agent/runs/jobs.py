"""The jobs run on a plan's runs (sweflow.agent.runs.plan.run_plan), shared by the CLI, the
pipeline's stages and the benchmarks: ``collect`` keeps the resolved runs as SFT data, ``infer``
writes predictions; ``replay_collect`` is collect with the replay teacher, ``replay_corrections``
the teacher's corrections of a student's runs.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.agent.config import AgentConfig, TeacherEdits
from sweflow.agent.runs.export import write_predictions, write_sft
from sweflow.agent.trajectory import DECLINED, Trajectory
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance

if TYPE_CHECKING:
    from sweflow.agent.runs.batch import Batch
    from sweflow.agent.runs.executor_batch import ExecutorBatch
    from sweflow.agent.runs.tts import Selection
    from sweflow.progress import Progress


@dataclass
class JobSummary:
    """The figures of a job (printed as a table, saved as summary.json)."""

    tasks: int = 0
    runs: int = 0
    submitted: int = 0
    graded: int = 0
    resolved: int = 0
    kept: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps: int = 0
    valid_steps: int = 0  # replies that parsed into an action
    exit_statuses: dict[str, int] = field(default_factory=dict)
    # of the kept runs' actions that open, edit, run or search the repository, the share that
    # rests on what the run had seen (sweflow.agent.teacher.imitable); None when nothing is kept
    imitable_fraction: float | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # task -> why the teacher declined it
    outputs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, trajectories: list[Trajectory]) -> JobSummary:
        return cls(
            tasks=len({t.instance_id for t in trajectories}),
            runs=len(trajectories),
            submitted=sum(t.exit_status == "submitted" for t in trajectories),
            graded=sum(t.reward is not None for t in trajectories),
            resolved=sum(t.resolved for t in trajectories),
            prompt_tokens=sum(t.prompt_tokens for t in trajectories),
            completion_tokens=sum(t.completion_tokens for t in trajectories),
            steps=sum(len(t.steps) for t in trajectories),
            valid_steps=sum(not s.format_error for t in trajectories for s in t.steps),
            exit_statuses=dict(Counter(t.exit_status for t in trajectories).most_common()),
            skipped={t.instance_id: t.error for t in trajectories if t.exit_status == DECLINED},
        )

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path


async def collect(rows: list[Instance], batch: Batch | ExecutorBatch) -> JobSummary:
    """K graded runs per task; the resolved ones become the SFT dataset (every style)."""
    if not batch.grades:
        raise ValueError("collect needs a batch with a grader")
    trajectories = await batch.run(rows)
    kept = [t for t in trajectories if t.resolved]
    summary = JobSummary.of(trajectories)
    summary.kept = len(kept)
    summary.imitable_fraction = imitable_fraction(kept)
    paths = write_sft(kept, batch.out_dir)
    summary.outputs = {style: str(path) for style, path in paths.items()}
    summary.outputs["summary"] = str(summary.save(batch.out_dir / "summary.json"))
    return summary


def imitable_fraction(trajectories: list[Trajectory]) -> float | None:
    """The share of grounded actions among the checked ones of ``trajectories`` (those that
    were checked: a run saved before the check existed has no figure); None without any."""
    checks = [t.imitable for t in trajectories if t.imitable is not None]
    if not checks:
        return None
    checked = sum(c.checked for c in checks)
    return round(sum(c.grounded for c in checks) / checked, 4) if checked else 1.0


async def infer(
    rows: list[Instance],
    batch: Batch | ExecutorBatch,
    model_name: str,
    selection: Selection | None = None,
    progress: Progress | None = None,
) -> JobSummary:
    """The batch's runs of each task; the diffs become preds.json. With a ``selection`` the runs
    are samples, each graded: every selector picks one per task, the chosen selector's picks are
    the predictions, and samples.json reports pass@k, best-of-n and oracle pass@N."""
    if selection is not None and not batch.grades:
        raise ValueError(
            "infer with selectors needs a batch with a grader (pass@k counts verdicts)"
        )
    trajectories = await batch.run(rows)
    summary = JobSummary.of(trajectories)
    picks = None
    if selection is not None:
        from sweflow.agent.runs.tts import pick_all, write_report

        picks = await pick_all(rows, trajectories, selection, batch.out_dir, progress)
        out = batch.out_dir
        report = write_report(out, trajectories, batch.rollouts, picks, selection.predict)
        summary.outputs["samples"] = str(report)
    chosen = picks[selection.predict] if picks and selection else None
    preds = write_predictions(batch.out_dir / "preds.json", trajectories, model_name, chosen)
    summary.outputs.update(predictions=str(preds), trajectories=str(batch.out_dir / "trajectories"))
    summary.outputs["summary"] = str(summary.save(batch.out_dir / "summary.json"))
    return summary


def replay_collect(
    rows: list[Instance],
    *,
    store: Path,
    specs: SpecTable,
    out_dir: Path,
    agent: AgentConfig | None = None,
    backend: str = "local",
    max_open_sandboxes: int = 4,
    edits: TeacherEdits = "str_replace",
) -> JobSummary:
    """``collect`` with the replay teacher on built rows: each gold patch reached and made
    through the agent's tools (its edits with the editor command ``edits``) and graded (golden
    trajectories without a model). ``agent``: the student's settings (default: the agent's
    defaults, in text mode), which the teacher plays by: its tool mode, its options (such as
    ``hide_durations``) and its step limit. Rows whose gold patch cannot be read raise, naming
    them; rows the teacher declines (no clue leads to a place the patch changes, or a route
    longer than the student's step limit) are in the summary's ``skipped``, with why."""
    from sweflow.agent.runs.plan import RunPlan, run_plan
    from sweflow.agent.teacher.replay import ReplayError, replay_clients
    from sweflow.grading import Grader

    agent = agent or AgentConfig(tool_mode="text")
    client_for, skipped = replay_clients(rows, agent.tool_mode, specs, agent.max_steps, edits)
    if skipped:
        raise ReplayError("; ".join(skipped.values()))
    plan = RunPlan(
        agent=agent,
        out_dir=out_dir,
        store=store,
        backend=backend,
        client_for=client_for,
        grader=Grader(store, specs, backend=backend, tamper_guard=True),
        max_open_sandboxes=max_open_sandboxes,
    )
    return asyncio.run(run_plan(plan, lambda batch: collect(rows, batch)))


def replay_corrections(
    runs: list[Trajectory],
    rows: list[Instance],
    *,
    store: Path,
    out: Path,
    backend: str = "local",
    edits: TeacherEdits = "str_replace",
) -> int:
    """The replay teacher's corrections of the student's ``runs`` on ``rows``
    (sweflow.agent.teacher.corrections, its edits made with ``edits``), written to ``out`` as SFT
    records (JSONL); how many. Each task's source is read from one sandbox of its environment."""
    from sweflow.agent.runs.export import write_records
    from sweflow.agent.teacher.corrections import corrections
    from sweflow.agent.teacher.source_map import SourceMap, read_sources
    from sweflow.envcache.builder import instance_sandbox_spec
    from sweflow.envcache.store import LayerStore
    from sweflow.sandbox import open_sandbox

    layers, records = LayerStore(store), []
    for row in corrected_tasks(runs, rows):
        spec = instance_sandbox_spec(layers, row.instance_id)
        with open_sandbox(spec, backend) as sandbox:
            source = SourceMap(asyncio.run(read_sources(sandbox, spec.workdir)))
        for run in (r for r in runs if r.instance_id == row.instance_id):
            records.extend(corrections(run, row, source, spec.workdir, edits))
    write_records(out, records)
    return len(records)


def corrected_tasks(runs: list[Trajectory], rows: list[Instance]) -> list[Instance]:
    """The rows ``runs`` are runs of, in run order; a run of a task not in ``rows``, or a task
    whose gold patch the teacher cannot read, raises a ReplayError naming it (before any sandbox
    opens)."""
    from sweflow.agent.teacher.replay import ReplayError, gold_files

    by_id = {row.instance_id: row for row in rows}
    if unknown := sorted({r.instance_id for r in runs} - set(by_id)):
        raise ReplayError(f"runs of tasks not in the dataset: {', '.join(unknown[:3])}")
    tasks = [by_id[iid] for iid in dict.fromkeys(r.instance_id for r in runs)]
    for row in tasks:
        gold_files(row)
    return tasks
