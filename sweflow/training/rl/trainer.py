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
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.agent.config import AgentConfig
from sweflow.cluster.local import LocalExecutor
from sweflow.grading import Grader
from sweflow.harness.specs import load_specs
from sweflow.instances import Instance
from sweflow.training.rl.backend import RLError, RLRun, StepProgress, rl_backend
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import EpisodeEnv
from sweflow.training.rl.result import RLResult
from sweflow.training.workdir import work_lock

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor


def train(
    tasks: list[Instance],
    policy: Path,
    work: Path,
    out: Path,
    rl: RLConfig,
    *,
    store: Path,
    specs: Path,
    agent: AgentConfig,
    backend: str = "local",
    policy_name: str | None = None,
    progress: StepProgress | None = None,
    executor: Executor | None = None,
) -> RLResult:
    """RL with the backend ``rl.backend`` names, episodes in sandboxes of ``store`` (built
    instances) on the sandbox ``backend``, graded with ``specs``: the CLI's and the pipeline's
    entry point. On a distributed ``executor`` (Ray) the episodes open their sandboxes, and are
    graded, on the cluster's nodes (the policy generates here)."""
    if not tasks:
        raise RLError("no train task has a built environment: nothing to roll out")
    trainer = rl_backend(rl.backend)
    grader = Grader(store, load_specs(specs), backend=backend, tamper_guard=rl.tamper_guard)
    env = episode_env(executor or LocalExecutor(store), grader, agent, backend)
    run = RLRun(tasks, policy, work, out, rl, env, store=store, specs=specs, backend=backend,
                policy_name=policy_name)  # fmt: skip
    with work_lock(work):
        if (done := trainer.result(run)) is not None:
            return done
        return trainer.train(run, trainer.resume(run), progress)


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
