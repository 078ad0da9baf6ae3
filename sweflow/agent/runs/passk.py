"""pass@k and best-of-n over many graded samples per task.

pass@k is the chance that at least one of k samples drawn without replacement from a task's n
graded samples resolves it; with c of the n resolving, the unbiased estimator of Chen et al.
2021 ("Evaluating Large Language Models Trained on Code", eq. 1) is ``1 - C(n-c, k) / C(n, k)``,
averaged over tasks. A sample that ended on an infrastructure failure, or whose grading failed,
has no verdict: it is left out of n and counted (``ungraded``), never scored 0. The overall
pass@k averages the tasks with at least k graded samples (``tasks_at_k`` says how many).

Best-of-n is a selector's pick (sweflow.agent.runs.selectors) graded: the share of tasks whose
picked sample resolved. Oracle pass@N is the share with any resolving sample: what a perfect
selector would reach; pass@1 is what no selection gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, Field

from sweflow.agent.trajectory import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al.'s unbiased pass@k of one task with ``c`` of ``n`` samples resolving."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples, not {n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n resolved samples, got c={c} of n={n}")
    if n - c < k:  # every draw of k holds a resolving sample
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class TaskSamples(BaseModel):
    """One task's samples: how many were graded and resolved, its pass@k, and each
    selector's pick (the sample index) and whether that pick resolved."""

    instance_id: str
    graded: int
    resolved: int
    ungraded: int = 0
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    picked: dict[str, int | None] = Field(default_factory=dict)
    picked_resolved: dict[str, bool] = Field(default_factory=dict)


class Rate(BaseModel):
    """A share of tasks, with its counts."""

    resolved: int
    tasks: int
    rate: float


class SamplesReport(BaseModel):
    """pass@k (k = 1..N), best-of-N per selector and oracle pass@N over the tasks."""

    samples: int
    tasks: int
    graded: int
    resolved_samples: int
    ungraded: int
    pass_at_k: dict[int, float]
    tasks_at_k: dict[int, int]
    best_of_n: dict[str, float]
    best_of_n_counts: dict[str, Rate]
    oracle_pass_at_n: float
    oracle: Rate
    predict: str = ""  # the selector whose picks are the predictions
    per_task: list[TaskSamples]


def graded(traj: Trajectory) -> bool:
    """A verdict to count: graded, and not an infrastructure failure the grader reported."""
    return traj.reward is not None and not traj.reward.get("infrastructure", False)


def samples_report(
    runs: list[Trajectory], samples: int, picks: Mapping[str, Mapping[str, int | None]]
) -> SamplesReport:
    """The report of ``runs`` (every sample of every task, ``samples`` asked per task) and
    ``picks`` (selector -> task -> picked sample index, None where it had nothing to pick)."""
    by_task: dict[str, list[Trajectory]] = {}
    for traj in runs:
        by_task.setdefault(traj.instance_id, []).append(traj)
    tasks = []
    for iid, trajs in by_task.items():
        kept = [t for t in trajs if graded(t)]
        n, c = len(kept), sum(t.resolved for t in kept)
        by_index = {t.run: t for t in trajs}
        chosen = {name: pick.get(iid) for name, pick in picks.items()}
        tasks.append(
            TaskSamples(
                instance_id=iid,
                graded=n,
                resolved=c,
                ungraded=len(trajs) - n,
                pass_at_k={k: pass_at_k(n, c, k) for k in range(1, n + 1)},
                picked=chosen,
                picked_resolved={
                    name: index is not None and index in by_index and by_index[index].resolved
                    for name, index in chosen.items()
                },
            )
        )
    return _overall(tasks, samples, list(picks))


def _overall(tasks: list[TaskSamples], samples: int, selectors: list[str]) -> SamplesReport:
    total = len(tasks)
    pass_k, at_k = {}, {}
    for k in range(1, samples + 1):
        values = [t.pass_at_k[k] for t in tasks if k in t.pass_at_k]
        at_k[k] = len(values)
        pass_k[k] = round(sum(values) / len(values), 4) if values else 0.0
    counts = {
        name: _rate(sum(t.picked_resolved.get(name, False) for t in tasks), total)
        for name in selectors
    }
    oracle = _rate(sum(t.resolved > 0 for t in tasks), total)
    return SamplesReport(
        samples=samples,
        tasks=total,
        graded=sum(t.graded for t in tasks),
        resolved_samples=sum(t.resolved for t in tasks),
        ungraded=sum(t.ungraded for t in tasks),
        pass_at_k=pass_k,
        tasks_at_k=at_k,
        best_of_n={name: rate.rate for name, rate in counts.items()},
        best_of_n_counts=counts,
        oracle_pass_at_n=oracle.rate,
        oracle=oracle,
        per_task=tasks,
    )


def _rate(resolved: int, tasks: int) -> Rate:
    return Rate(resolved=resolved, tasks=tasks, rate=round(resolved / tasks, 4) if tasks else 0.0)


def report_rows(report: SamplesReport) -> list[tuple[str, str, str]]:
    """The report as (figure, rate, counts) rows for people: pass@k for each k, best-of-N per
    selector, oracle pass@N (a CLI table and the Prefect report's Markdown alike)."""
    n = report.samples
    rows = [
        (
            f"pass@{k}",
            f"{report.pass_at_k[k]:.3f}",
            f"{report.resolved_samples} of {report.graded} samples resolved"
            if k == 1
            else f"over {report.tasks_at_k[k]} task(s)",
        )
        for k in report.pass_at_k
    ]
    rows += [
        (f"best-of-{n} {name}", f"{rate.rate:.3f}", f"{rate.resolved} of {rate.tasks} tasks")
        for name, rate in report.best_of_n_counts.items()
    ]
    rows.append(
        (
            f"oracle pass@{n}",
            f"{report.oracle.rate:.3f}",
            f"{report.oracle.resolved} of {report.oracle.tasks} tasks",
        )
    )
    return rows


def report_markdown(report: SamplesReport) -> str:
    """The report as a Markdown table, then one row per task."""
    lines = ["| figure | rate | counts |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in report_rows(report)]
    if report.ungraded:
        lines += ["", f"{report.ungraded} sample(s) without a verdict (left out of n)."]
    names = list(report.best_of_n)
    lines += [
        "",
        "| task | resolved of graded | " + " | ".join(f"{n} picks" for n in names) + " |",
        "| --- | --- |" + " --- |" * len(names),
    ]
    for task in report.per_task:
        cells = [
            "-"
            if task.picked.get(name) is None
            else f"{task.picked[name]} ({'resolved' if task.picked_resolved[name] else 'no'})"
            for name in names
        ]
        lines.append(
            f"| {task.instance_id} | {task.resolved} of {task.graded} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"
