"""A built instance as a sandbox spec: its layers, workdir and environment, under a lease.

The spec names the lease on its layer stack (``SandboxSpec.leases``): a sandbox opened from it
holds the lease while open, so no gc, in this process or another, removes a layer under it.
"""

from __future__ import annotations

from sweflow.envcache import leases
from sweflow.envcache.store import LayerStore, StoreError
from sweflow.sandbox import SandboxSpec

WORKDIR = "/testbed"


def instance_sandbox_spec(store: LayerStore, instance_id: str, **overrides: object) -> SandboxSpec:
    """The spec of a sandbox on a built instance; ``overrides`` are SandboxSpec fields.

    The manifest is read, its layers found (a packed one mounted) and the lease taken under one
    hold of the store: a gc runs before (the instance is then whatever it left) or after (and
    then keeps the layers), never in between."""
    with store.hold():
        manifest = store.read_manifest(instance_id)
        if manifest is None:
            raise StoreError(f"{instance_id}: not built in {store.root} (run `sweflow env build`)")
        lease = leases.take(store, manifest)
        layers = store.layer_paths(manifest)
    kwargs: dict = dict(
        layers=layers,
        workdir=manifest.meta.get("workdir", WORKDIR),
        env=manifest.meta.get("env", {}),
        leases=[lease],
    )
    kwargs.update(overrides)
    return SandboxSpec(**kwargs)
