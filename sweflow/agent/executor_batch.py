"""Agent runs as executor work: each (task, rollout) run, with its grading, is one work item,
placed by the executor (a Ray cluster's sandbox slots) and run on that node's layer store.

A :class:`~sweflow.agent.batch.Batch` runs everything in this process with asyncio. An
:class:`ExecutorBatch` has the same ``run`` and leaves the same files (trajectories, grading
logs): the done runs are read here, as a Batch reads them, and only the others travel; a run
that ended but was not graded travels with its trajectory and is only graded.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sweflow.agent.batch import (
    Batch,
    OnDone,
    grade_with,
    load_done,
    needs_grading,
    trajectory_path,
)
from sweflow.agent.client import ChatModel, ModelClient
from sweflow.agent.config import AgentConfig, ModelConfig
from sweflow.agent.trajectory import Trajectory
from sweflow.cluster.base import Executor, Node
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.instances import Instance

Run = tuple[Instance, int, Trajectory | None]  # (task, rollout index, its saved ungraded run)


@dataclass
class RolloutWork:
    """One agent run (and its grading) on the node it lands on: the picklable recipe of a
    one-run Batch. ``model`` is the endpoint every run calls (it must answer from the nodes),
    or None with ``client_for`` (a teacher such as replay, one client per run)."""

    agent: AgentConfig
    backend: str
    model: ModelConfig | None = None
    client_for: Callable[[Instance], ChatModel] | None = None
    grader: Grader | None = None

    def __call__(self, item: Run, out: Path, node: Node) -> Trajectory:
        instance, run, saved = item
        store = LayerStore(node.store)
        if not store.has_instance(instance.instance_id):
            node.fetch(store, instance.instance_id)  # not built anywhere: the run says so
        if saved is not None:  # ended here before, not graded yet: grade it, do not re-run it
            saved.save(trajectory_path(out, instance.instance_id, run))
        return asyncio.run(self._run(instance, run, out, store))

    async def _run(self, instance: Instance, run: int, out: Path, store: LayerStore):
        client = ModelClient(self.model) if self.model is not None else None
        try:
            batch = Batch(
                client=client,
                client_for=self.client_for,
                agent=self.agent,
                out_dir=out,
                spec_for=lambda row: instance_sandbox_spec(store, row.instance_id),
                backend=self.backend,
                grade=grade_with(self._grader(store.root, out)) if self.grader else None,
            )
            return await batch.one(instance, run)
        finally:
            if client is not None:
                await client.close()

    def _grader(self, store: Path, out: Path) -> Grader:
        """The grader on this node's store, its logs beside the trajectories as in a Batch."""
        grader = copy.copy(self.grader.on_store(store))  # type: ignore[union-attr]
        grader.log_dir = out / "grading"
        return grader


@dataclass
class ExecutorBatch:
    """Batch's ``run`` on an executor: one work item per (task, rollout) run."""

    work: RolloutWork
    executor: Executor
    out_dir: Path
    rollouts: int = 1
    on_done: OnDone | None = None
    max_workers: int = 8  # runs at once on the local executor (a cluster's slots bound Ray's)

    @property
    def grades(self) -> bool:
        return self.work.grader is not None

    async def run(self, instances: list[Instance]) -> list[Trajectory]:
        """Every (instance, rollout) run, in input order; already-done runs come from disk."""
        return await asyncio.to_thread(self._run, instances)

    def _run(self, instances: list[Instance]) -> list[Trajectory]:
        runs = [(inst, k) for inst in instances for k in range(self.rollouts)]
        results: list[Trajectory | None] = [None] * len(runs)
        todo: list[tuple[int, Run]] = []
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
