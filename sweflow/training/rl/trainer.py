"""On-policy RL with sandboxed rewards: the policy acts as the sweflow agent, "the tests pass" is
the reward, and the policy is updated on its own rollouts.

:func:`train` is the one entry point (CLI, pipeline, benchmarks): it builds where the episodes
run, takes the backend ``rl.backend`` names from the registry (sweflow.training.rl.backends)
and, holding the work folder's lock, returns the published result for these inputs if there is
one, else asks the backend where a killed attempt resumes and trains. Whichever backend ran,
the result is a Hugging Face folder published whole (what the ``infer`` stage serves next) and
an :class:`~sweflow.training.rl.result.RLResult` with per-step records.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.agent.config import AgentConfig
from sweflow.cluster.local import LocalExecutor
from sweflow.grading import Grader
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.sandbox.base import backend_class
from sweflow.training.rl.backend import OnRLStep, RLError, RLRun, rl_backend
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import EpisodeEnv
from sweflow.training.rl.result import RLResult
from sweflow.training.workdir import work_lock

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor
    from sweflow.tracking import TrackingRun

SAMPLES = 4  # episodes of the first and of the last step logged as sample trajectories


def train(
    tasks: list[Instance],
    policy: Path,
    work: Path,
    out: Path,
    rl: RLConfig,
    *,
    store: Path,
    specs: SpecTable,
    agent: AgentConfig,
    backend: str = "local",
    policy_name: str | None = None,
    progress: OnRLStep | None = None,
    executor: Executor | None = None,
    val_tasks: list[Instance] | None = None,
    tracking: TrackingRun | None = None,
) -> RLResult:
    """RL with the backend ``rl.backend`` names, episodes in sandboxes of ``store`` (built
    instances) on the sandbox ``backend``, graded with ``specs``: the CLI's and the pipeline's entry
    point. On a distributed ``executor`` (Ray) the episodes open their sandboxes, and are graded, on
    the cluster's nodes (the policy generates here). ``val_tasks`` are what ``rl.validation``
    measures the policy on (sweflow.training.rl.validation). ``tracking``: the run the stage reports
    to (its ``rl.*`` settings, the trainer's per-step metrics, sample episodes, the model's
    manifest)."""
    if not backend_class(backend).isolated:
        raise RLError(
            f"RL runs a policy's patches, and sandbox backend {backend!r} isolates nothing: "
            "choose one that does (local, docker, e2b)"
        )
    if not tasks:
        raise RLError("no train task has a built environment: nothing to roll out")
    if rl.validation is not None and not val_tasks:
        raise RLError("rl.validation is set but no validation task has a built environment")
    trainer = rl_backend(rl.backend)
    grader = Grader(store, specs, backend=backend, tamper_guard=rl.tamper_guard)
    env = episode_env(executor or LocalExecutor(store), grader, agent, backend)
    run = RLRun(
        tasks,
        policy,
        work,
        out,
        rl,
        env,
        store=store,
        specs=specs,
        backend=backend,
        policy_name=policy_name,
        val_tasks=list(val_tasks or []) if rl.validation is not None else [],
        tracking=tracking,
    )
    if tracking is not None:  # first: a tracker that refuses them, refuses before the work
        tracking.params("rl", {**rl.model_dump(), "policy": run.base_model, "tasks": len(tasks)})
    with work_lock(work):
        found = trainer.result(run)
        result = found or trainer.train(run, trainer.resume(run), progress)
    if tracking is not None:
        track(tracking, result, work, steps=found is not None)
    return result


def track(tracking: TrackingRun, result: RLResult, work: Path, steps: bool) -> None:
    """The run's figures and artifacts in its tracking run: its steps as recorded when
    ``steps`` (else the trainer reported them as it went), the reward of its first and last
    quarter, the curves, a few episodes of the first and of the last step (sweflow's
    rollouts, when the backend keeps them), the model's manifest."""
    for record in result.records if steps else []:
        tracking.metrics("rl", {**record, **record.get("extra", {})}, record["step"])
    first, last = result.quarter_rewards()
    figures = {
        "reward_first_quarter": first,
        "reward_last_quarter": last,
        "infra_failures": result.infra_failures,
        "train_seconds": result.train_seconds,
    }
    tracking.metrics("rl", figures, result.steps)
    if result.curves:
        tracking.files("rl", [Path(result.curves)])
    folders = sorted((work / "rollouts").glob("step-*"))
    for step in dict.fromkeys(folders[:1] + folders[-1:]):
        episodes = sorted(step.glob("*.json"))
        tracking.files("rl", list(itertools.islice(episodes, SAMPLES)), f"samples/{step.name}")
    tracking.model("rl", Path(result.model), work)


def episode_env(executor: Executor, grader: Grader, agent: AgentConfig, backend: str) -> EpisodeEnv:
    """Episodes whose sandboxes and gradings run where ``executor`` runs work (this process's
    store, or the nodes of a cluster; the policy generates here either way)."""
    return EpisodeEnv(
        open=lambda row: executor.open_sandbox(row.instance_id, backend),
        grade=lambda row, patch: executor.run_near(
            row.instance_id, functools.partial(grade_on, grader, row, patch)
        ),
        agent=agent,
    )


def grade_on(grader: Grader, row: Instance, patch: str, store: Path):
    """``grader``'s reward for ``patch``, on the layer store of the node it runs on."""
    return grader.on_store(store).reward(row, patch)
