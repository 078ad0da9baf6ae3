"""Agent runs as executor work: each (task, rollout) run, with its grading, is one work item,
placed by the executor (a Ray cluster's sandbox slots) and run on that node's layer store.

A :class:`~sweflow.agent.runs.batch.Batch` runs everything in this process with asyncio. An
:class:`ExecutorBatch` has the same ``run`` and leaves the same files (trajectories, grading
logs): the done runs are read here, as a Batch reads them, and only the others travel; a run
that ended but was not graded travels with its trajectory and is only graded. What one work
item does on its node is the plan's (sweflow.agent.runs.plan.RolloutWork).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from sweflow.agent.runs.batch import OnDone, load_done, needs_grading, trajectory_path
from sweflow.agent.trajectory import Trajectory
from sweflow.cluster.base import Executor, Work
from sweflow.instances import Instance

# (task, rollout index, its saved ungraded run)
PendingRun = tuple[Instance, int, Trajectory | None]


@dataclass
class ExecutorBatch:
    """Batch's ``run`` on an executor: one ``work`` item per (task, rollout) run."""

    work: Work[PendingRun, Trajectory]
    executor: Executor
    out_dir: Path
    rollouts: int = 1
    grades: bool = False  # whether the work grades: a saved run without its reward travels
    on_done: OnDone | None = None
    max_workers: int = 8  # runs at once on the local executor (a cluster's slots bound Ray's)

    async def run(self, instances: list[Instance]) -> list[Trajectory]:
        """Every (instance, rollout) run, in input order; already-done runs come from disk."""
        return await asyncio.to_thread(self._run, instances)

    def _run(self, instances: list[Instance]) -> list[Trajectory]:
        runs = [(inst, k) for inst in instances for k in range(self.rollouts)]
        results: list[Trajectory | None] = [None] * len(runs)
        todo: list[tuple[int, PendingRun]] = []
        for index, (instance, run) in enumerate(runs):
            saved = load_done(trajectory_path(self.out_dir, instance.instance_id, run))
            if saved is not None and not (self.grades and needs_grading(saved)):
                results[index] = saved
                if self.on_done:
                    self.on_done(saved, True)
            else:
                todo.append((index, (instance, run, saved)))
        done = self.executor.map(
            self.work,
            [item for _, item in todo],
            [self.out_dir] * len(todo),
            keys=[run_key(instance.instance_id, run) for _, (instance, run, _) in todo],
            max_workers=self.max_workers,
            on_done=(lambda traj: self.on_done(traj, False)) if self.on_done else None,
        )
        for (index, _), traj in zip(todo, done, strict=True):
            results[index] = traj
        return results  # type: ignore[return-value]


def run_key(instance_id: str, run: int) -> str:
    """How a run is named in executor messages and the stage's node table."""
    return f"{instance_id} run {run}"
