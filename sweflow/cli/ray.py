"""``sweflow ray start``: a Ray node with sandbox slots and a layer store of its own."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import typer

from sweflow.cli.common import App, folder_or_new, port_number, positive, work_starts

ray_app = App(help="Run sweflow's per-instance work on a Ray cluster.")


@ray_app.command("start")
def ray_start(
    address: str | None = typer.Option(
        None, "--address", help="HOST:PORT of the head to join; without it, start a head."
    ),
    store: Path | None = typer.Option(
        None,
        "--store",
        help="This node's own layer store (default: the store each command names).",
        callback=folder_or_new,
    ),
    slots: int | None = typer.Option(
        None,
        "--slots",
        help="Sandboxes this node runs at once (default: its cores, 2 GiB of memory each).",
        callback=positive,
    ),
    name: str | None = typer.Option(None, "--name", help="The node's name in reports."),
    port: int = typer.Option(6379, "--port", help="The head's port.", callback=port_number),
    cpus: int | None = typer.Option(
        None, "--cpus", help="CPUs Ray may use (default: all).", callback=positive
    ),
    node_ip: str | None = typer.Option(
        None, "--node-ip", help="The address this node is reached at (127.0.0.1: loopback only)."
    ),
    dashboard: bool = typer.Option(True, help="Serve the Ray dashboard (head only)."),
    temp_dir: Path | None = typer.Option(None, "--temp-dir", help="Ray's session folder (head)."),
) -> None:
    """Start a Ray node in the foreground (Ctrl-C or SIGTERM stops it and its processes).

    Examples:
      sweflow ray start --store /var/lib/sweflow/store
      sweflow ray start --address 10.0.0.1:6379 --store /var/lib/sweflow/store --slots 64
    """
    from sweflow.cluster.node import (
        NODE_NAME_ENV,
        NODE_STORE_ENV,
        default_slots,
        ray_start_command,
    )

    ray = shutil.which(
        "ray", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if ray is None:
        raise typer.BadParameter("Ray is not installed: pip install 'sweflow[ray]'")
    command = ray_start_command(
        ray,
        address=address,
        port=port,
        slots=slots or default_slots(),
        cpus=cpus,
        node_ip=node_ip,
        dashboard=dashboard,
        temp_dir=temp_dir,
    )
    work_starts(f"start a Ray {'node joining ' + address if address else 'head'}")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
        env[NODE_STORE_ENV] = str(store.resolve())
    if name is not None:
        env[NODE_NAME_ENV] = name
    os.execve(ray, command, env)
