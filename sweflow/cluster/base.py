"""Where per-instance work runs: the protocol every executor keeps (threads of this process,
tasks on a Ray cluster, or any executor registered in sweflow.cluster.executors).

A stage hands an executor a *work*: a picklable callable ``work(item, out, node)`` that does one
item (build, validate or grade one instance; one agent run), writes its files under ``out`` and
returns a result. ``node`` says where it runs: the layer store of that node and how to bring an
instance's layers from another node. An executor that runs work elsewhere does it in a scratch
folder there and brings the folder's files back to ``out``, so every executor leaves the same
files, and every executor returns the results in the order of the items.

Loops that stay in this process (an RL trainer's episodes, whose policy generates here) use an
executor for what can move: a sandbox opened on a node, a function run on a node's store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from sweflow.envcache.store import LayerStore
from sweflow.sandbox import Sandbox

T = TypeVar("T")
R = TypeVar("R")


def _no_peers(_store: LayerStore, _instance_id: str) -> bool:
    return False


@dataclass
class Node:
    """The machine a work item runs on, as the work sees it."""

    name: str
    store: Path
    fetch: Callable[[LayerStore, str], bool] = field(default=_no_peers, repr=False)
    """Bring ``instance_id``'s manifest and layers from another node into the store; False
    when no node has it (the work then builds it)."""


class Work(Protocol[T, R]):  # type: ignore[misc]
    def __call__(self, item: T, out: Path, node: Node) -> R: ...


@dataclass
class Retry:
    """A work item that ran more than once (its node died, or its worker did)."""

    item: str
    nodes: list[str]


class Executor(Protocol):
    name: str
    distributed: bool
    """Whether work runs on other machines' stores: agent runs then travel as work items
    (sweflow.agent.runs.executor_batch), and what the nodes built must be brought here
    (:meth:`bring`) before this process opens a sandbox of it."""
    ray_address: str | None
    """The Ray cluster this executor runs on, for trainers that launch on Ray themselves
    (verl); None when there is none to join."""

    def map(
        self,
        work: Work,
        items: Sequence[T],
        outs: Sequence[Path],
        *,
        keys: Sequence[str],
        max_workers: int,
        on_done: Callable[[R], None] | None = None,
    ) -> list[R]:
        """``work(item, out, node)`` for each item (``keys`` name them in messages), results in
        item order; ``on_done`` sees each result as it lands."""
        ...

    def retries(self) -> list[Retry]:
        """The items of the last ``map`` that ran more than once."""
        ...

    def node_of(self, key: str) -> str:
        """The node that did item ``key`` in the last ``map``."""
        ...

    def bring(self, store: Path, instance_ids: list[str]) -> int:
        """Make the instances the nodes built available in ``store`` (this process's), for work
        that runs here; returns how many came."""
        ...

    def open_sandbox(self, instance_id: str, backend: str) -> Sandbox:
        """A sandbox of a built instance, on a node with a free sandbox slot."""
        ...

    async def run_near(self, instance_id: str, fn: Callable[[Path], R]) -> R:
        """``fn(store)`` on a node with a free sandbox slot, ``store`` that node's layer store
        holding ``instance_id`` (a grading of an episode's patch)."""
        ...

    def close(self) -> None:
        """Let go of what the executor holds on the cluster."""
        ...

    def describe(self) -> str:
        """A line for people: where the work ran (the Ray dashboard's address, for Ray)."""
        ...
