"""The docker backend: the same spec and shell protocol as ``local``, in a docker container.

- :mod:`.images`: the spec's layers as docker images, one per layer prefix, loaded straight into
  the daemon (nothing is pulled);
- :mod:`.stream`: the container's attach stream back to the shell protocol's byte stream;
- :mod:`.backend`: :class:`DockerSandbox` (container, persistent shell, timeouts, files);
- :mod:`.client`: the daemon's client and the containers' owner labels (gc);
- :mod:`.daemon`: a private ``dockerd`` for tests and benchmarks when none answers.

Importing this package does not import the docker SDK; opening a sandbox does.
"""

from sweflow.sandbox.docker.backend import DockerSandbox
from sweflow.sandbox.docker.client import docker_client, remove_leftover_containers
from sweflow.sandbox.docker.images import ensure_image, image_tag

__all__ = [
    "DockerSandbox",
    "docker_client",
    "ensure_image",
    "image_tag",
    "remove_leftover_containers",
]
