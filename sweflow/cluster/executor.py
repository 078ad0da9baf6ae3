"""Where per-instance work runs: threads of this process, or tasks on a Ray cluster.

A stage hands an executor a *work*: a picklable callable ``work(item, out, node)`` that does one
item (build, validate or grade one instance), writes its files under ``out`` and returns a
result. ``node`` says where it runs: the layer store of that node and how to bring an instance's
layers from another node. The local executor runs the work in threads with ``out`` as given;
the Ray executor (sweflow.cluster.ray_executor) runs it on a cluster node in a scratch folder
and brings the folder's files back to ``out``, so both leave the same files, and both return
the results in the order of the items.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError
from sweflow.sandbox.tracking import interruptible_map

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

    def close(self) -> None:
        """Let go of what the executor holds on the cluster."""
        ...

    def describe(self) -> str:
        """A line for people: where the work ran (the Ray dashboard's address, for Ray)."""
        ...


class LocalExecutor:
    """Threads of this process, on the store named by the stage."""

    name = "local"

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

    def close(self) -> None:
        """Nothing to let go of: the threads end with each map."""

    def describe(self) -> str:
        return "local: threads of this process"


EXECUTORS = ("local", "ray")


def make_executor(name: str, store: Path, *, address: str | None = None, **ray_options) -> Executor:
    """The executor a config or CLI names (``ray`` needs the ``ray`` extra installed)."""
    if name == "local":
        return LocalExecutor(store)
    if name == "ray":
        from sweflow.cluster.ray_executor import RayExecutor

        return RayExecutor(address, store, **ray_options)
    raise ConfigError(f"executor: {name!r} is not one of {', '.join(EXECUTORS)}")
