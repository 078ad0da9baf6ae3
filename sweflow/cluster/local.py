"""The local executor: work items in threads of this process, on the store the stage names."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sweflow.cluster.base import Node, Retry
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.sandbox import Sandbox, open_sandbox
from sweflow.sandbox.tracking import interruptible_map


class LocalExecutor:
    """Threads of this process, on the store named by the stage."""

    name = "local"
    distributed = False
    ray_address = None

    def __init__(self, store: Path) -> None:
        self.node = Node("local", Path(store))

    def map(self, work, items, outs, *, keys, max_workers, on_done=None):
        if not len(items) == len(outs) == len(keys):
            raise ValueError("items, outs and keys differ in length")

        def one(index: int):
            result = work(items[index], outs[index], self.node)
            if on_done:
                on_done(result)
            return result

        return interruptible_map(one, range(len(items)), max_workers)

    def retries(self) -> list[Retry]:
        return []

    def node_of(self, key: str) -> str:
        return self.node.name

    def bring(self, store: Path, instance_ids: list[str]) -> int:
        """Nothing to bring: the work ran on this process's store."""
        return 0

    def open_sandbox(self, instance_id: str, backend: str) -> Sandbox:
        return open_sandbox(
            instance_sandbox_spec(LayerStore(self.node.store), instance_id), backend
        )

    async def run_near(self, instance_id: str, fn):
        return await asyncio.to_thread(fn, self.node.store)

    def close(self) -> None:
        """Nothing to let go of: the threads end with each map."""

    def describe(self) -> str:
        return "local: threads of this process"
