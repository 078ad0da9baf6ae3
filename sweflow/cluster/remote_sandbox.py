"""Sandboxes and gradings on cluster nodes, for loops that stay in this process.

A TRL trainer's episodes generate with the policy in the trainer's process, one token stream
per episode; only their sandboxes and gradings can move. Each episode's sandbox is a Ray actor
(:class:`SandboxHost`) that holds one sweflow sandbox on a node with a free ``sweflow_slot``,
opened on that node's store (the instance brought from a peer when the node lacks it), and
:class:`RemoteSandbox` is the Sandbox protocol over it: the agent loop runs unchanged. A
grading is a Ray task on a node with a free slot, on that node's store.

A node that dies under a sandbox is a SandboxCrashError, under a grading an InfrastructureError:
an episode dropped and retried as an infrastructure failure, never a reward of 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from sweflow.cluster.node import SLOT
from sweflow.cluster.ray_executor import RayExecutor, fetcher, node_store
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.errors import InfrastructureError, SweflowError
from sweflow.grading import Grader
from sweflow.instances import Instance
from sweflow.sandbox import ExecResult, Sandbox, SandboxCrashError, SandboxStartError, open_sandbox
from sweflow.sandbox.spec import SandboxSpec


def _on_node(default_store: str, peers: dict, ledger, instance_id: str) -> LayerStore:
    """This node's store, holding ``instance_id`` when any node has it."""
    store = LayerStore(node_store(Path(default_store)))
    if not store.has_instance(instance_id):
        own = ray.get_runtime_context().get_node_id()
        fetcher(peers, own, ledger, instance_id)(store, instance_id)
    return store


class SandboxHost:
    """One sandbox of an instance, on the node this actor runs on."""

    def __init__(self, instance_id: str, backend: str, default_store: str, peers, ledger) -> None:
        store = _on_node(default_store, peers, ledger, instance_id)
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

    def __init__(self, executor: RayExecutor, instance_id: str, backend: str) -> None:
        host = ray.remote(SandboxHost).options(
            num_cpus=0, resources={SLOT: executor.slots_per_task}, max_restarts=0
        )
        self.instance_id = instance_id
        self._closed = False
        self.actor = host.remote(instance_id, backend, str(executor.store), executor.servers,
                                 executor.ledger)  # fmt: skip
        try:
            self.spec = ray.get(self.actor.spec.remote())
        except ray.exceptions.RayError as exc:
            ray.kill(self.actor)
            cause = _cause(exc)
            raise SandboxStartError(
                f"{instance_id}: the sandbox did not open on the cluster: {cause}"
            ) from cause

    def _call(self, ref) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise SandboxCrashError(f"{self.instance_id}: the sandbox's node died: {exc}") from exc
        except ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None

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


def _grade_on_node(grader: Grader, instance: Instance, patch: str, default_store, peers, ledger):
    store = _on_node(default_store, peers, ledger, instance.instance_id)
    return grader.on_store(store.root).reward(instance, patch)


async def grade_remotely(executor: RayExecutor, grader: Grader, instance: Instance, patch: str):
    """``grader.reward(instance, patch)`` as a Ray task on a node with a free sandbox slot."""
    task = ray.remote(_grade_on_node).options(
        num_cpus=0, resources={SLOT: executor.slots_per_task}, max_retries=executor.max_retries
    )
    ref = task.remote(grader, instance, patch, str(executor.store), executor.servers,
                      executor.ledger)  # fmt: skip
    try:
        return await ref
    except ray.exceptions.RayTaskError as exc:
        raise _cause(exc) from None
    except ray.exceptions.RayError as exc:
        raise InfrastructureError(f"{instance.instance_id}: grading on the cluster: {exc}") from exc


def _cause(exc: ray.exceptions.RayError) -> Exception:
    """The error a task or actor raised (a SweflowError keeps its type), else ``exc``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, SweflowError) else exc
