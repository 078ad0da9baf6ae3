"""The nodes of a Ray cluster as sweflow's tasks see them: each node's own layer store, the
actor that serves it to the other nodes, and the ledger of what ran where.

Every node keeps its own store (``sweflow ray start --store``, given to its workers as
``SWEFLOW_NODE_STORE``; without one, the store the command names). One :class:`StoreServer` actor
per node serves its manifests and layers; a node that lacks an instance asks the others for it
(sweflow.cluster.layers moves the layers) before building it itself. :class:`NodeStores` is what
a task carries to reach all of this from whichever node it lands on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from sweflow.cluster import layers
from sweflow.cluster.node import NODE_NAME_ENV, NODE_STORE_ENV
from sweflow.envcache.records import LayerInfo
from sweflow.envcache.store import LayerStore
from sweflow.errors import SweflowError


def node_name() -> str:
    """This node's name in reports (``sweflow ray start --name``), else its Ray id's start."""
    return os.environ.get(NODE_NAME_ENV) or ray.get_runtime_context().get_node_id()[:8]


def node_store(default: Path) -> Path:
    """The store of the node this runs on (``sweflow ray start --store``), else ``default``."""
    return Path(os.environ.get(NODE_STORE_ENV) or default)


class StoreServer:
    """One per node: that node's manifests and layers, for the other nodes."""

    def __init__(self, default_store: str) -> None:
        self.store = LayerStore(node_store(Path(default_store)))

    def describe(self) -> tuple[str, str]:
        return node_name(), str(self.store.root)

    def manifest(self, instance_id: str):
        if not self.store.has_instance(instance_id):
            return None
        return self.store.read_manifest(instance_id)

    def info(self, digest: str) -> LayerInfo:
        return self.store.layer_info(digest)

    def layer(self, digest: str) -> layers.LayerPayload:
        return layers.export_layer(self.store, digest)


class Ledger:
    """Attempts and transfers of the current map, kept on the driver's node."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.attempts: dict[str, list[tuple[str, str]]] = {}  # key: [(node name, node id)]
        self.running: set[str] = set()
        self.moved: dict[str, layers.Moved] = {}

    def start(self, key: str, node: str, node_id: str) -> None:
        self.attempts.setdefault(key, []).append((node, node_id))
        self.running.add(key)

    def finish(self, key: str) -> None:
        self.running.discard(key)

    def add_moved(self, key: str, moved: layers.Moved) -> None:
        self.moved[key] = moved

    def state(self) -> tuple[dict[str, list[tuple[str, str]]], set[str]]:
        return self.attempts, self.running

    def transfers(self) -> dict[str, layers.Moved]:
        return self.moved


@dataclass(frozen=True)
class NodeStores:
    """What a task carries to reach the cluster's stores from any node: the store of nodes
    started without one, every node's StoreServer (by node id) and the driver's Ledger."""

    default: str
    servers: dict[str, Any]
    ledger: Any

    def here(self) -> Path:
        return node_store(Path(self.default))

    def fetcher(self, own_id: str, key: str) -> Callable[[LayerStore, str], bool]:
        """``Node.fetch`` on the node ``own_id``: the first live peer that has the instance
        sends it; the transfer is recorded in the ledger under ``key``."""

        def fetch(store: LayerStore, instance_id: str) -> bool:
            for node_id, peer in self.servers.items():
                if node_id == own_id:
                    continue
                try:
                    manifest = ray.get(peer.manifest.remote(instance_id))
                    if manifest is None:
                        continue
                    moved, start = layers.Moved(), time.monotonic()
                    with store.hold():
                        for digest in layers.missing_layers(store, manifest):
                            if layers.link_shared_base(store, ray.get(peer.info.remote(digest))):
                                continue
                            payload = ray.get(peer.layer.remote(digest))
                            layers.import_layer(store, payload)
                            moved.layers += 1
                            moved.bytes += len(payload.tar)
                        layers.adopt_manifest(store, manifest)
                    moved.seconds = time.monotonic() - start
                    ray.get(self.ledger.add_moved.remote(key, moved))
                    return True
                except ray.exceptions.RayError:  # that peer is gone: ask the next one
                    continue
            return False

        return fetch

    def holding(self, instance_id: str) -> LayerStore:
        """This node's store, holding ``instance_id`` when any node has it."""
        store = LayerStore(self.here())
        if not store.has_instance(instance_id):
            own = ray.get_runtime_context().get_node_id()
            self.fetcher(own, instance_id)(store, instance_id)
        return store


def task_error(exc: ray.exceptions.RayError) -> Exception:
    """The error a task or actor raised (a SweflowError keeps its type), else ``exc``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, SweflowError) else exc
