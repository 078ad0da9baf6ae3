"""A batch of agent runs, said once: the plan (what every run needs) and :func:`run_plan`, the
one way to run a job on it, here or on a cluster.

plan = RunPlan(agent=AgentConfig(), out_dir=out, store=store, model=ModelConfig(...), grader=g)
summary = await run_plan(plan, lambda batch: collect(rows, batch), executor=ray_executor)

The command line's ``collect`` and ``infer``, the pipeline's agent stages, the replay teacher's
collect and the learning benchmark all describe their runs as a plan. On a distributed executor
(Ray) each run travels as a work item that runs a one-run plan on its node's store; otherwise
a Batch runs them in this process, the model client opened for the job and closed after it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sweflow.agent.client import ChatModel, ModelClient
from sweflow.agent.config import AgentConfig, ModelConfig
from sweflow.agent.runs.batch import Batch, OnDone, grade_with, trajectory_path
from sweflow.agent.runs.executor_batch import ExecutorBatch, PendingRun
from sweflow.agent.runs.samples import Sampling
from sweflow.agent.trajectory import Trajectory
from sweflow.cluster.base import Executor, Node
from sweflow.envcache.instance_spec import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError
from sweflow.instances import Instance

if TYPE_CHECKING:  # grading pulls in swebench (seconds): a plan without a grader needs none
    from sweflow.grading import Grader

T = TypeVar("T")
ClientFor = Callable[[Instance], ChatModel]  # a client per run (a teacher such as replay)
Job = Callable[[Batch | ExecutorBatch], Awaitable[T]]  # what is done with the runs
BOUNDS = ("rollouts", "max_open_sandboxes", "max_grading")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """Everything a batch of runs needs besides its tasks. ``model`` is the endpoint every run
    calls (it must answer from the nodes on a cluster), or ``client_for`` gives each run its
    own client; with neither, the runs saved under ``out_dir`` are only read (and graded)."""

    agent: AgentConfig
    out_dir: Path  # trajectories/TASK/run-K.json, and the grading logs of a distributed run
    store: Path  # the layer store holding the tasks' environments
    backend: str = "local"
    model: ModelConfig | None = None
    client_for: ClientFor | None = None
    grader: Grader | None = None  # each run that ends is graded, its reward saved with it
    rollouts: int = 1  # runs per task
    sampling: Sampling | None = None  # the rollouts as samples: a temperature, a seed each
    max_open_sandboxes: int = 8  # runs at once
    max_grading: int = 2  # gradings at once

    def __post_init__(self) -> None:
        if self.model is not None and self.client_for is not None:
            raise ConfigError("a run plan has one model for every run or a client per run")
        for name in BOUNDS:
            if getattr(self, name) < 1:
                raise ConfigError(f"run plan: {name} is {getattr(self, name)}, at least 1")


async def run_plan(
    plan: RunPlan, job: Job[T], *, executor: Executor | None = None, on_done: OnDone | None = None
) -> T:
    """``job`` on the plan's runs: as work items on ``executor``'s nodes when it is distributed,
    else in this process. ``on_done`` sees each run as it ends (resumed: read from disk)."""
    if executor is not None and executor.distributed:
        batch = ExecutorBatch(
            RolloutWork(plan),
            executor,
            plan.out_dir,
            rollouts=plan.rollouts,
            grades=plan.grader is not None,
            on_done=on_done,
            max_workers=plan.max_open_sandboxes,
        )
        return await job(batch)
    return await run_here(plan, job, on_done)


async def run_here(
    plan: RunPlan, job: Callable[[Batch], Awaitable[T]], on_done: OnDone | None = None
) -> T:
    """``job`` on a Batch of the plan in this process, its model client open while it runs."""
    layers = LayerStore(plan.store)
    client = ModelClient(plan.model) if plan.model is not None else None
    batch = Batch(
        client=client,
        client_for=plan.client_for,
        agent=plan.agent,
        out_dir=plan.out_dir,
        spec_for=lambda row: instance_sandbox_spec(layers, row.instance_id),
        rollouts=plan.rollouts,
        max_open_sandboxes=plan.max_open_sandboxes,
        max_grading=plan.max_grading,
        backend=plan.backend,
        grade=grade_with(plan.grader) if plan.grader is not None else None,
        on_done=on_done,
        sampling=plan.sampling,
    )
    try:
        return await job(batch)
    finally:
        if client is not None:
            await client.close()


@dataclasses.dataclass
class RolloutWork:
    """One agent run (and its grading) on the node it lands on: the plan, picklable, run there
    as a one-run plan on that node's store."""

    plan: RunPlan

    def __call__(self, item: PendingRun, out: Path, node: Node) -> Trajectory:
        instance, run, saved = item
        store = LayerStore(node.store)
        if not store.has_instance(instance.instance_id):
            node.fetch(store, instance.instance_id)  # not built anywhere: the run says so
        if saved is not None:  # ended here before, not graded yet: grade it, do not re-run it
            saved.save(trajectory_path(out, instance.instance_id, run))
        here = dataclasses.replace(
            self.plan, store=store.root, out_dir=out, grader=self._grader(store.root, out)
        )
        return asyncio.run(run_here(here, lambda batch: batch.one(instance, run)))

    def _grader(self, store: Path, out: Path) -> Grader | None:
        """The grader on this node's store, its logs beside the trajectories as in a Batch."""
        if self.plan.grader is None:
            return None
        grader = copy.copy(self.plan.grader.on_store(store))
        grader.log_dir = out / "grading"
        return grader
