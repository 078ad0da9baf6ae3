"""Sandboxes and functions on cluster nodes, for loops that stay in this process.

A TRL trainer's episodes generate with the policy in the trainer's process, one token stream
per episode; only their sandboxes and gradings can move. Each episode's sandbox is a Ray actor
(:class:`SandboxHost`) that holds one sweflow sandbox on a node with a free ``sweflow_slot``,
opened on that node's store (the instance brought from a peer when the node lacks it), and
:class:`RemoteSandbox` is the Sandbox protocol over it: the agent loop runs unchanged. A
grading is a function run as a Ray task on a node with a free slot, on that node's store
(:func:`run_on_node`).

A node that dies under a sandbox is a SandboxCrashError, under a function an
InfrastructureError: an episode dropped and retried as an infrastructure failure, never a
reward of 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import ray

from sweflow.cluster.node import SLOT
from sweflow.cluster.ray_nodes import NodeStores, task_error
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.errors import InfrastructureError
from sweflow.sandbox import ExecResult, Sandbox, SandboxCrashError, SandboxStartError, open_sandbox
from sweflow.sandbox.spec import SandboxSpec

R = TypeVar("R")


class SandboxHost:
    """One sandbox of an instance, on the node this actor runs on."""

    def __init__(self, stores: NodeStores, instance_id: str, backend: str) -> None:
        store = stores.holding(instance_id)
        self.sandbox = open_sandbox(instance_sandbox_spec(store, instance_id), backend)

    def spec(self) -> SandboxSpec:
        return self.sandbox.spec

    def exec(self, cmd, timeout, env, cwd, max_output) -> ExecResult:
        return self.sandbox.exec(cmd, timeout, env, cwd, max_output=max_output)

    def read(self, path: str) -> bytes:
        return self.sandbox.read(path)

    def write(self, path: str, data: bytes | str) -> None:
        self.sandbox.write(path, data)

    def diff(self) -> str:
        return self.sandbox.diff()

    def close(self) -> None:
        self.sandbox.close()


class RemoteSandbox(Sandbox):
    """The Sandbox protocol over a :class:`SandboxHost` actor."""

    def __init__(self, stores: NodeStores, slots: float, instance_id: str, backend: str) -> None:
        host = ray.remote(SandboxHost).options(num_cpus=0, resources={SLOT: slots}, max_restarts=0)
        self.instance_id = instance_id
        self._closed = False
        self.actor = host.remote(stores, instance_id, backend)
        try:
            self.spec = ray.get(self.actor.spec.remote())
        except ray.exceptions.RayError as exc:
            ray.kill(self.actor)
            cause = task_error(exc)
            raise SandboxStartError(
                f"{instance_id}: the sandbox did not open on the cluster: {cause}"
            ) from cause

    def _call(self, ref) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise SandboxCrashError(f"{self.instance_id}: the sandbox's node died: {exc}") from exc
        except ray.exceptions.RayTaskError as exc:
            raise task_error(exc) from None

    def exec(self, cmd, timeout=None, env=None, cwd=None, *, max_output=None) -> ExecResult:
        return self._call(self.actor.exec.remote(cmd, timeout, env, cwd, max_output))

    def read(self, path: str) -> bytes:
        return self._call(self.actor.read.remote(path))

    def write(self, path: str, data: bytes | str) -> None:
        self._call(self.actor.write.remote(path, data))

    def diff(self) -> str:
        return self._call(self.actor.diff.remote())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self.actor.close.remote())
        except ray.exceptions.RayError:
            pass  # its node is gone, and the sandbox with it (`sweflow sandbox gc` there)
        finally:
            ray.kill(self.actor)


def _run_on_node(fn, instance_id: str, stores: NodeStores):
    return fn(stores.holding(instance_id).root)


async def run_on_node(
    stores: NodeStores, placement: dict, instance_id: str, fn: Callable[[Path], R]
) -> R:
    """``fn(store)`` as a Ray task placed by ``placement`` (a node with a free sandbox slot),
    ``store`` that node's, holding ``instance_id``."""
    ref = ray.remote(_run_on_node).options(**placement).remote(fn, instance_id, stores)
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        raise task_error(exc) from None
    except ray.exceptions.RayError as exc:
        raise InfrastructureError(f"{instance_id}: on the cluster: {exc}") from exc
