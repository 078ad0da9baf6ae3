"""Test-time scaling over a job's samples: every selector picks one sample per task (best-of-n),
the picks of one become the predictions, and pass@k, best-of-n and oracle pass@N are reported
(sweflow.agent.runs.passk).

Selectors see only the views (sweflow.agent.runs.selectors.view), through :func:`choose`, the
one place a selector is called. Each selector's picks are kept in
``<out>/selections/<selector>.json`` as they are made, under a digest of the task's samples, so a
re-run picks again only where the samples changed (an interrupted run, a sample drawn since).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from sweflow.agent.runs.passk import SamplesReport, report_markdown, samples_report
from sweflow.agent.runs.selectors import Selector, SelectorContext, make_selector
from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView, check_inputs
from sweflow.agent.trajectory import DECLINED, INFRA_FAILURES, Trajectory
from sweflow.errors import ConfigError
from sweflow.files import write_atomic
from sweflow.instances import Instance
from sweflow.progress import Progress

Picks = dict[str, dict[str, int | None]]  # selector -> task -> the sample it picked
REPORT = "samples.json"


@dataclass
class Selection:
    """Which selectors pick among a task's samples, whose picks are the predictions, and what
    the selectors may use."""

    selectors: list[str]
    predict: str
    context: SelectorContext
    max_tasks: int = 2  # tasks picked at once (the tests selector opens a sandbox a sample)

    def __post_init__(self) -> None:
        if self.predict not in self.selectors:
            raise ConfigError(
                f"the predictions come from selector {self.predict!r}, which is not among "
                f"the selectors run ({', '.join(self.selectors)})"
            )


async def choose(selector: Selector, task: TaskView, candidates: list[Candidate]) -> Choice:
    """``selector``'s pick, handed the views only; a pick that is no candidate is refused."""
    check_inputs(task, candidates)
    choice = await selector.choose(task, candidates)
    if choice.index not in {c.index for c in candidates}:
        raise ConfigError(f"selector picked sample {choice.index} of {task.instance_id}: none")
    return choice


def candidates_of(runs: list[Trajectory]) -> list[Candidate]:
    """The samples a selector may pick: those that ran (not an infrastructure failure, not a
    task a teacher declined)."""
    return [Candidate.of(t) for t in runs if t.exit_status not in {*INFRA_FAILURES, DECLINED}]


def _digest(candidates: list[Candidate]) -> str:
    seen = [(c.index, c.exit_status, c.patch, len(c.steps)) for c in candidates]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:16]


async def pick_all(
    rows: list[Instance],
    runs: list[Trajectory],
    selection: Selection,
    out_dir: Path,
    progress: Progress | None = None,
) -> Picks:
    """Every selector's pick for every task of ``rows`` (None where no sample ran)."""
    by_task: dict[str, list[Candidate]] = {row.instance_id: [] for row in rows}
    for traj in runs:
        by_task.setdefault(traj.instance_id, []).extend(candidates_of([traj]))
    tasks = [(TaskView.of(row), by_task[row.instance_id]) for row in rows]
    picks: Picks = {}
    for name in selection.selectors:
        selector = make_selector(name, selection.context)
        picker = _Picker(name, selector, out_dir, len(tasks), progress)
        bound = asyncio.Semaphore(selection.max_tasks)
        picks[name] = dict(await asyncio.gather(*(picker.pick(t, c, bound) for t, c in tasks)))
    return picks


class _Picker:
    """One selector's picks, kept in its file as they are made."""

    def __init__(
        self, name: str, selector: Selector, out_dir: Path, total: int, progress: Progress | None
    ) -> None:
        self.name, self.selector, self.progress, self.total = name, selector, progress, total
        safe = re.sub(r"[^\w.-]", "_", name)  # a dotted path's colon
        self.path = out_dir / "selections" / f"{safe}.json"
        self.kept = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.done = 0

    async def pick(
        self, task: TaskView, candidates: list[Candidate], bound: asyncio.Semaphore
    ) -> tuple[str, int | None]:
        iid = task.instance_id
        if not candidates:
            return iid, None
        key = _digest(candidates)
        entry = self.kept.get(iid)
        if entry is None or entry.get("samples") != key:
            async with bound:
                choice = await choose(self.selector, task, candidates)
            entry = self.kept[iid] = {"samples": key, **asdict(choice)}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self.kept, indent=1, default=str) + "\n")
        self.done += 1
        if self.progress:
            line = f"{self.name} picks sample {entry['index']} of {iid}"
            self.progress(line, self.done, self.total)
        return iid, entry["index"]


def write_report(
    out_dir: Path, runs: list[Trajectory], samples: int, picks: Picks, predict: str
) -> Path:
    """samples.json (and its Markdown twin samples.md) under ``out_dir``; ``predict`` names
    the selector whose picks are the predictions."""
    report = samples_report(runs, samples, picks)
    report.predict = predict
    path = out_dir / REPORT
    write_atomic(path, report.model_dump_json(indent=1) + "\n")
    write_atomic(path.with_suffix(".md"), report_markdown(report))
    return path


def load_report(path: Path) -> SamplesReport:
    return SamplesReport.model_validate_json(Path(path).read_text())
