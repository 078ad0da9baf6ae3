"""The docker daemon as the docker backend sees it: a client, and who owns which container.

Every sandbox container carries a label naming its owner (host, pid and the pid's start time),
so ``sweflow sandbox gc`` can remove the containers of owners that are gone without touching
another live process's, or another host's.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from sweflow.sandbox.errors import SandboxConfigError, SandboxStartError
from sweflow.sandbox.procs import owner_is_gone

if TYPE_CHECKING:
    import docker

LABEL = "sweflow.sandbox"
OWNER_LABEL = "sweflow.sandbox.owner"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def docker_client() -> docker.DockerClient:
    """A client of the daemon at DOCKER_HOST (or the default socket), or a SandboxError."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxConfigError(
            "the docker backend needs the docker SDK: pip install 'sweflow[docker]'"
        ) from exc
    host = os.environ.get("DOCKER_HOST")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        tried = (
            f"DOCKER_HOST={host}"
            if host
            else f"the default socket {DEFAULT_SOCKET} (DOCKER_HOST is unset)"
        )
        raise SandboxStartError(
            f"no docker daemon answers at {tried}: {exc}. Start one (as root: `dockerd "
            ">/tmp/dockerd.log 2>&1 &`, from the docker.io package) or point DOCKER_HOST at a "
            "running daemon."
        ) from exc
    return client


def remove_leftover_containers(client: docker.DockerClient | None = None) -> list[str]:
    """Remove sweflow containers whose owning process (on this host) is gone; returns their ids."""
    client = client or docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        if not owner_is_gone(container.labels.get(OWNER_LABEL, "")):
            continue  # its sandbox is still open, or it is another host's
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.id)
    return removed
