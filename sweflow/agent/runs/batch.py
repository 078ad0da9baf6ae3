"""Many runs at once: asyncio tasks, a bound on open sandboxes, a separate bound on grading.
Each run's steps are checked for imitability (sweflow.agent.teacher.imitable) as it ends.

Each run's trajectory is saved as soon as it ends, so a batch that is stopped and started again
skips what is done: a saved run counts as done unless it ended on an infrastructure failure
(model or sandbox error), which is re-run; a done run still missing its reward is only graded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweflow.agent.client import ChatModel, ModelClient
from sweflow.agent.config import AgentConfig
from sweflow.agent.loop import run_agent
from sweflow.agent.runs.samples import Sampling
from sweflow.agent.teacher.imitable import imitability
from sweflow.agent.trajectory import DECLINED, INFRA_FAILURES, SANDBOX_ERROR, Trajectory
from sweflow.errors import SweflowError
from sweflow.instances import Instance
from sweflow.sandbox import SandboxSpec, open_sandbox

Grade = Callable[[Instance, str], Awaitable[dict[str, Any]]]
SpecFor = Callable[[Instance], SandboxSpec]
OnDone = Callable[[Trajectory, bool], None]  # (trajectory, resumed from disk)


def trajectory_path(out_dir: Path, instance_id: str, run: int) -> Path:
    return Path(out_dir) / "trajectories" / instance_id / f"run-{run}.json"


def load_done(path: Path) -> Trajectory | None:
    """A saved trajectory that needs no re-run, or None."""
    try:
        traj = Trajectory.load(path)
    except (FileNotFoundError, ValueError, ValidationError):
        return None
    return None if traj.exit_status in INFRA_FAILURES or not traj.exit_status else traj


def needs_grading(traj: Trajectory) -> bool:
    """A run that ended (not on an infrastructure failure, not declined) without its reward."""
    return traj.reward is None and traj.exit_status not in {*INFRA_FAILURES, DECLINED}


def reward_dict(result: Any) -> dict[str, Any]:
    """A grader's result (dataclass, pydantic model or dict) as a JSON-ready dict."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        data = dataclasses.asdict(result)
    elif hasattr(result, "model_dump"):
        data = result.model_dump(mode="json")
    else:
        data = dict(result)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}


def grade_with(grader: Any) -> Grade:
    """A Batch's ``grade`` from a grader with ``areward(instance, patch)``
    (sweflow.grading.Grader)."""

    async def grade(instance: Instance, patch: str) -> dict[str, Any]:
        return reward_dict(await grader.areward(instance, patch))

    return grade


@dataclasses.dataclass
class Batch:
    """What a batch needs besides its instances."""

    client: ChatModel | None  # shared by every run, or None with ``client_for``
    agent: AgentConfig
    out_dir: Path
    spec_for: SpecFor
    rollouts: int = 1
    max_open_sandboxes: int = 8
    max_grading: int = 2
    backend: str = "local"
    grade: Grade | None = None
    on_done: OnDone | None = None
    client_for: Callable[[Instance], ChatModel] | None = None  # one per run (a teacher)
    sampling: Sampling | None = None  # each rollout a sample: its temperature and own seed

    def __post_init__(self) -> None:
        self._bounds()

    def _bounds(self) -> None:
        """Fresh bounds on open sandboxes and gradings (each ``run`` may be a new event loop)."""
        self._sandboxes = asyncio.Semaphore(self.max_open_sandboxes)
        self._grading = asyncio.Semaphore(self.max_grading)

    async def run(self, instances: list[Instance]) -> list[Trajectory]:
        """Every (instance, rollout) run, in input order; already-done runs come from disk."""
        self._bounds()
        jobs = [(inst, k) for inst in instances for k in range(self.rollouts)]
        return list(await asyncio.gather(*(self.one(inst, k) for inst, k in jobs)))

    @property
    def grades(self) -> bool:
        return self.grade is not None

    async def one(self, instance: Instance, run: int) -> Trajectory:
        """Run ``run`` of ``instance`` (read from disk when done), graded when the batch grades."""
        path = trajectory_path(self.out_dir, instance.instance_id, run)
        traj = load_done(path)
        resumed = traj is not None
        if traj is None:
            traj = await self._rollout(instance, run)
            await asyncio.to_thread(traj.save, path)
        if self.grade is not None and needs_grading(traj):
            async with self._grading:
                try:
                    traj.reward = await self.grade(instance, traj.patch)
                except SweflowError as exc:  # left ungraded: a resumed batch grades it again
                    traj.error = f"grading failed: {exc}"
            await asyncio.to_thread(traj.save, path)
        if self.on_done is not None:
            self.on_done(traj, resumed)
        return traj

    async def _rollout(self, instance: Instance, run: int) -> Trajectory:
        async with self._sandboxes:
            began = time.perf_counter()
            try:
                client = self.client_for(instance) if self.client_for else self.client
                assert client is not None, "a Batch needs client or client_for"
                if self.sampling is not None and isinstance(client, ModelClient):
                    client = client.sampled(self.sampling.temperature, self.sampling.seed_of(run))
                sandbox = await asyncio.to_thread(
                    open_sandbox, self.spec_for(instance), self.backend
                )
            except SweflowError as exc:  # not built, the sandbox would not open, a bad teacher
                return Trajectory(
                    instance_id=instance.instance_id,
                    run=run,
                    model=self.client.name if self.client else "",
                    exit_status=SANDBOX_ERROR,
                    error=str(exc),
                )
            opened = time.perf_counter() - began
            async with sandbox:
                traj = await run_agent(instance, sandbox, client, self.agent, run=run)
            workdir = sandbox.spec.workdir
            traj.imitable = imitability(instance.problem_statement, traj.steps, workdir)
            if client is not self.client:
                await client.close()
            traj.sandbox_open_s = opened
            if self.sampling is not None:
                traj.sampling = self.sampling.record(run)
            return traj
