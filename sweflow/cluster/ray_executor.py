"""The Ray executor: per-instance work as Ray tasks, placed by sandbox slots, on per-node stores.

- Placement: each task asks for ``slots_per_task`` of the custom resource ``sweflow_slot``
  (``sweflow ray start`` gives a node one slot per core, fewer when memory is short) and no CPU,
  so a node runs as many sandboxes at once as it has slots.
- Stores: a node's work uses the node's own store (sweflow.cluster.ray_nodes), else the stage's
  store (one machine, or a shared filesystem); a node that lacks an instance asks the others
  before building it itself.
- Files: a task works in a scratch folder on its node; the files it leaves come back with its
  result and are written under the ``out`` the stage asked for, paths in the result rewritten,
  so a Ray run leaves the files of a local run.
- Faults: a task whose node or worker dies is run again elsewhere (``max_retries``); a
  ``Ledger`` actor on the driver's node records every attempt, so the stage can say what ran
  twice. Tasks that cannot start (no node offers the slots they ask for) are reported as
  waiting, and the map fails after ``wait_timeout_s`` without progress instead of hanging.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sweflow.cluster import layers
from sweflow.cluster.base import Node, Retry
from sweflow.cluster.node import SLOT, default_slots
from sweflow.cluster.ray_nodes import Ledger, NodeStores, StoreServer, node_name
from sweflow.cluster.remote_sandbox import RemoteSandbox, run_on_node
from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError, SweflowError
from sweflow.sandbox import tracking

CONNECT_TIMEOUT_S = 5.0


class ClusterError(SweflowError):
    """The cluster cannot run the work: no answer, no node with slots, or work that waits."""


def _run_item(work, item, out: str, key: str, stores: NodeStores):
    """One work item on this node, in a scratch folder whose files travel back."""
    own_id = ray.get_runtime_context().get_node_id()
    ray.get(stores.ledger.start.remote(key, node_name(), own_id))
    scratch = Path(tempfile.mkdtemp(prefix="sweflow-work-"))
    try:
        node = Node(node_name(), stores.here(), stores.fetcher(own_id, key))
        result = work(item, scratch, node)
        files = {
            str(path.relative_to(scratch)): path.read_bytes()
            for path in sorted(scratch.rglob("*"))
            if path.is_file()
        }
        return rebase(result, str(scratch), out), files, node_name()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def rebase(value: Any, old: str, new: str) -> Any:
    """``value`` with every path under ``old`` (in strings, Paths, dataclasses, pydantic models,
    lists, tuples and dicts) moved under ``new``."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, Path):
        return Path(str(value).replace(old, new))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: rebase(getattr(value, f.name), old, new)
            for f in dataclasses.fields(value)
            if f.init
        }
        return dataclasses.replace(value, **fields)
    if isinstance(value, BaseModel):
        return value.model_copy(update={k: rebase(v, old, new) for k, v in value})
    if isinstance(value, list | tuple):
        return type(value)(rebase(v, old, new) for v in value)
    if isinstance(value, dict):
        return {k: rebase(v, old, new) for k, v in value.items()}
    return value


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), CONNECT_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


class RayExecutor:
    """Work items as Ray tasks on the cluster at ``address`` (None: a Ray of this machine)."""

    name = "ray"
    distributed = True

    def __init__(
        self,
        store: Path,
        *,
        address: str | None = None,
        slots_per_task: float = 1.0,
        max_retries: int = 3,
        wait_timeout_s: float = 600.0,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        if slots_per_task <= 0 or max_retries < 0 or wait_timeout_s <= 0:
            raise ConfigError(
                "ray executor: slots_per_task and wait_timeout_s must be positive and "
                f"max_retries not negative (got {slots_per_task}, {wait_timeout_s}, {max_retries})"
            )
        self.store = Path(store).absolute()
        self.ray_address = address
        self.slots_per_task = slots_per_task
        self.max_retries = max_retries
        self.wait_timeout_s = wait_timeout_s
        self.notify = notify or (lambda line: print(line, file=sys.stderr))
        self.dashboard_url = self._connect(address)
        self.nodes = self._slot_nodes()
        servers = {
            node_id: ray.remote(StoreServer)
            .options(num_cpus=0, scheduling_strategy=_on(node_id))
            .remote(str(self.store))
            for node_id in self.nodes
        }
        own = ray.get_runtime_context().get_node_id()
        ledger = ray.remote(Ledger).options(num_cpus=0, scheduling_strategy=_on(own)).remote()
        self.stores = NodeStores(str(self.store), servers, ledger)
        self.ledger = ledger
        self._retries: list[Retry] = []
        self.moved: dict[str, layers.Moved] = {}
        self.homes: dict[str, str] = {}  # key: the node that last did it (it has the layers)
        self.placed: dict[str, str] = {}  # key: the name of the node that did it

    # -- cluster ------------------------------------------------------------------------------
    def _connect(self, address: str | None) -> str:
        probe = address is not None and address != "auto" and not address.startswith("ray://")
        if probe and not _answers(address):
            raise ClusterError(
                f"no Ray cluster answers at {address} (waited {CONNECT_TIMEOUT_S:.0f} s): start "
                "one with `sweflow ray start`, or check the address"
            )
        if ray.is_initialized():  # this process joined a cluster already (a test, a notebook)
            return ray.init(ignore_reinit_error=True).dashboard_url or ""
        if address is None:
            context = ray.init(
                num_cpus=os.cpu_count(),
                resources={SLOT: default_slots()},
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            context = ray.init(address=address, log_to_driver=False)
        return context.dashboard_url or ""

    def _slot_nodes(self) -> dict[str, float]:
        nodes = {
            node["NodeID"]: node["Resources"].get(SLOT, 0.0)
            for node in ray.nodes()
            if node["Alive"] and node["Resources"].get(SLOT, 0.0) > 0
        }
        if not nodes:
            raise ClusterError(
                f"no node of the Ray cluster offers {SLOT!r}: start nodes with `sweflow ray start`"
                f" (or `ray start --resources '{{\"{SLOT}\": N}}'`)"
            )
        return nodes

    def describe(self) -> str:
        where = f"dashboard http://{self.dashboard_url}" if self.dashboard_url else "no dashboard"
        slots = sum(self.nodes.values())
        return f"ray: {len(self.nodes)} node(s), {slots:g} sandbox slots, {where}"

    def close(self) -> None:
        for actor in [*self.stores.servers.values(), self.ledger]:
            ray.kill(actor)

    # -- work ---------------------------------------------------------------------------------
    def map(self, work, items, outs, *, keys, max_workers, on_done=None):
        """``max_workers`` is the local executor's: here the nodes' slots bound the work."""
        if not len(items) == len(outs) == len(keys):
            raise ValueError("items, outs and keys differ in length")
        ray.get(self.ledger.reset.remote())  # a fresh ledger per map
        task = ray.remote(_run_item)
        placement = {**self._placement(), "retry_exceptions": False}
        work_ref = ray.put(work)
        pending = {
            task.options(**placement, scheduling_strategy=self._near(key)).remote(
                work_ref, item, str(out), key, self.stores
            ): i
            for i, (item, out, key) in enumerate(zip(items, outs, keys, strict=True))
        }
        results: list[Any] = [None] * len(items)
        try:
            self._collect(pending, results, outs, keys, on_done)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        attempts, _ = ray.get(self.ledger.state.remote())
        self._retries = [
            Retry(key, [name for name, _ in runs])
            for key, runs in attempts.items()
            if len(runs) > 1
        ]
        self.homes.update({key: runs[-1][1] for key, runs in attempts.items()})
        self.moved = ray.get(self.ledger.transfers.remote())
        return results

    def _near(self, key: str):
        """Where ``key`` ran before (its layers are there) when that node can take it now,
        else wherever a slot is free."""
        home = self.homes.get(key)
        if home is None or home not in self.nodes:
            return "DEFAULT"
        return NodeAffinitySchedulingStrategy(home, soft=True, _spill_on_unavailable=True)

    def node_of(self, key: str) -> str:
        return self.placed.get(key, "")

    def _collect(self, pending: dict, results: list, outs, keys, on_done) -> None:
        last_progress = time.monotonic()
        told = False
        while pending:
            if tracking.interrupted():  # Ctrl-C reached a thread that is not this one
                raise KeyboardInterrupt
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    result, files, node = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    why = f"the work failed on the cluster: {exc}"
                    raise ClusterError(f"{keys[index]}: {why}") from exc
                _write_files(Path(outs[index]), files)
                self.ledger.finish.remote(keys[index])
                self.placed[keys[index]] = node
                results[index] = result
                last_progress = time.monotonic()
                if on_done:
                    on_done(result)
            if ready or not pending:
                continue
            attempts, running = ray.get(self.ledger.state.remote())
            if running:
                last_progress = time.monotonic()
                continue
            waiting = [keys[i] for i in pending.values() if keys[i] not in attempts]
            waited = time.monotonic() - last_progress
            if waiting and not told and waited > 5:
                self.notify(
                    f"ray: {len(waiting)} task(s) waiting for a node with "
                    f"{self.slots_per_task:g} free {SLOT} ({self._offer()})"
                )
                told = True
            if waiting and waited > self.wait_timeout_s:
                raise ClusterError(
                    f"{len(waiting)} task(s) waited {waited:.0f} s and none could start: each "
                    f"asks for {self.slots_per_task:g} {SLOT} and {self._offer()} "
                    f"(first waiting: {waiting[0]})"
                )

    def _offer(self) -> str:
        offers = [n["Resources"].get(SLOT, 0.0) for n in ray.nodes() if n["Alive"]]
        return f"the {len(offers)} live node(s) offer {', '.join(f'{o:g}' for o in offers)}"

    def retries(self) -> list[Retry]:
        return self._retries

    def bring(self, store: Path, instance_ids: list[str]) -> int:
        """Fetch into ``store`` (this process's) the instances the nodes built, for work that
        runs here (agent rollouts, RL); returns how many came."""
        here, fetch = LayerStore(store), self.stores.fetcher("", "driver")
        return sum(1 for iid in instance_ids if not here.has_instance(iid) and fetch(here, iid))

    # -- loops that stay in this process ------------------------------------------------------
    def open_sandbox(self, instance_id: str, backend: str):
        return RemoteSandbox(self.stores, self.slots_per_task, instance_id, backend)

    async def run_near(self, instance_id: str, fn):
        return await run_on_node(self.stores, self._placement(), instance_id, fn)

    def _placement(self) -> dict:
        """A task's Ray options: sandbox slots instead of CPUs, retried where its node died."""
        return {
            "num_cpus": 0,
            "resources": {SLOT: self.slots_per_task},
            "max_retries": self.max_retries,
        }


def _on(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _write_files(out: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
