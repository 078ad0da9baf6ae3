"""A cluster node as sweflow sees it: its sandbox slots, its own store, its name.

``sweflow ray start`` runs ``ray start`` with these set: the custom resource ``sweflow_slot``
(sandboxes the node runs at once: one per core, fewer when memory is short, 2 GiB each) and the
environment variables that every Ray worker on the node inherits, naming its layer store and
the node itself in reports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SLOT = "sweflow_slot"
NODE_STORE_ENV = "SWEFLOW_NODE_STORE"
NODE_NAME_ENV = "SWEFLOW_NODE_NAME"
GIB_PER_SLOT = 2


def default_slots() -> int:
    """Sandboxes this machine runs at once: its cores, capped by memory at 2 GiB each."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, min(os.cpu_count() or 1, int(memory_gib // GIB_PER_SLOT)))


def ray_start_command(
    ray: str,
    *,
    address: str | None,
    port: int,
    slots: int,
    cpus: int | None,
    node_ip: str | None,
    dashboard: bool,
    temp_dir: Path | None,
) -> list[str]:
    """The ``ray start --block`` command line of a head (no ``address``) or a joining node."""
    command = [
        ray,
        "start",
        "--block",
        "--disable-usage-stats",
        "--resources",
        json.dumps({SLOT: slots}),
    ]
    if address is None:
        command += ["--head", f"--port={port}", f"--include-dashboard={str(dashboard).lower()}"]
        if temp_dir is not None:
            command.append(f"--temp-dir={temp_dir}")
    else:
        command.append(f"--address={address}")
    if cpus is not None:
        command.append(f"--num-cpus={cpus}")
    if node_ip is not None:
        command.append(f"--node-ip-address={node_ip}")
    return command
