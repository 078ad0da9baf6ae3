"""What every episode of a run in an outside trainer's workers shares: the rollout context.

verl's agent-loop workers and SkyRL's generator run sweflow episodes in processes of their own
(Ray actors, on any node). The backend writes one JSON file with all they need, the tasks and
their repositories' specs (which may live on the head node only), the policy, the agent and
``rl`` settings, the sandbox backend, and how many workers share a node, so that each bounds
its open sandboxes to its share of the node's slots. Each worker reads it once
(:func:`rollout_context`) and opens sandboxes from, and grades on, its own node's layer store
(``sweflow ray start --store``; else the run's store). The file must be on storage every node
sees, as the policy is.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from pathlib import Path

from sweflow.agent.config import AgentConfig
from sweflow.cluster.local import LocalExecutor
from sweflow.cluster.node import default_slots
from sweflow.cluster.ray_nodes import node_store
from sweflow.grading import Grader
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.training.chat import ChatEncoder
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import episode_env

CONTEXT_FILE = "rollout.json"


def write_context(
    folder: Path,
    tasks: list[Instance],
    policy: Path,
    store: Path,
    specs: SpecTable,
    agent: AgentConfig,
    rl: RLConfig,
    backend: str,
    workers_per_node: int,
) -> Path:
    """The rollout context file under ``folder``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    context = folder / CONTEXT_FILE
    context.write_text(
        json.dumps(
            {
                "tasks": [task.model_dump(mode="json") for task in tasks],
                "policy": str(policy),
                "store": str(store),
                "agent": agent.model_dump(mode="json"),
                "specs": specs.as_mapping({task.repo for task in tasks}),
                "rl": rl.model_dump(mode="json"),
                "backend": backend,
                "workers_per_node": workers_per_node,
            },
            indent=1,
        )
    )
    return context


class RolloutContext:
    """What every episode of a run shares, read once per worker from the context file."""

    def __init__(self, path: Path) -> None:
        data = json.loads(path.read_text())
        rows = [Instance.model_validate(row) for row in data["tasks"]]
        self.tasks: dict[str, Instance] = {row.instance_id: row for row in rows}
        self.rl = RLConfig(**data["rl"])
        self.encoder = ChatEncoder(Path(data["policy"]))
        store, backend = node_store(Path(data["store"])), data["backend"]
        specs = SpecTable.from_mapping(data["specs"], source=f"{path}: specs")
        grader = Grader(store, specs, backend=backend, tamper_guard=self.rl.tamper_guard)
        self.env = episode_env(LocalExecutor(store), grader, AgentConfig(**data["agent"]), backend)
        self.slots = max(1, default_slots() // data["workers_per_node"])
        self.open = asyncio.Semaphore(self.slots)  # episodes (sandbox and grading) at once


@cache
def rollout_context(path: str) -> RolloutContext:
    return RolloutContext(Path(path))
