"""Docker images of layer stacks, written straight to the daemon (nothing is ever pulled).

The spec's layers become one docker image *per layer prefix*, each tagged
``sweflow-layers:<digest[:16]>`` and built only when missing (under a file lock, so two processes
never build the same one): image ``[L0]`` holds L0 as its only layer; image ``[L0..Lk]`` is image
``[L0..Lk-1]`` plus one layer made from ``Lk``. Layers are written straight to the daemon with
``docker load`` (a hand-made image archive: the new layer's tar, a config naming the parent's
layer digests, a manifest); the daemon skips the layers it already has, so a base rootfs shared by
many images is stored once. Each layer travels as the docker-form tar of
:mod:`sweflow.sandbox.layertar` (whiteouts as ``.wh.`` entries), so the image shows what the local
backend's overlayfs shows. Nothing is ever pulled: there is no registry.

The cache key of a layer is its resolved path plus the layer's fingerprint (layertar), checked at
every open.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.paths import cache_root
from sweflow.progress import Progress
from sweflow.sandbox.errors import SandboxStartError
from sweflow.sandbox.layertar import file_lock, layer_fingerprint, write_layer_tar

if TYPE_CHECKING:
    import docker

IMAGE_REPO = "sweflow-layers"
IMAGE_LABEL = "sweflow.layers"
LAYER_FORMAT = "sweflow-docker-layer-v1"  # part of every digest: bump it to rebuild all images


def layers_digest(layers: list[Path]) -> str:
    """Digest of a layer list (lowest first): format, resolved paths and fingerprints."""
    h = hashlib.sha256(LAYER_FORMAT.encode())
    for layer in layers:
        resolved = layer.resolve()
        h.update(b"\0" + str(resolved).encode() + b"\0" + layer_fingerprint(resolved).encode())
    return h.hexdigest()


def image_tag(layers: list[Path]) -> str:
    return f"{IMAGE_REPO}:{layers_digest(layers)[:16]}"


def ensure_image(
    client: docker.DockerClient, layers: list[Path], progress: Progress | None = None
) -> str:
    """The tag of the image of ``layers``, building the missing prefix images (never pulling)."""
    import docker.errors

    tags = [image_tag(layers[: i + 1]) for i in range(len(layers))]
    try:
        client.images.get(tags[-1])
        return tags[-1]
    except docker.errors.ImageNotFound:
        pass
    parent_ids: list[str] = []
    for i, tag in enumerate(tags):
        with file_lock("docker", tag.replace(":", "-")):
            try:
                image = client.images.get(tag)
            except docker.errors.ImageNotFound:
                if progress:
                    progress(f"docker: building image {tag} (layer {layers[i]})")
                started = time.monotonic()
                _load_layer_image(client, tag, layers[: i + 1], parent_ids)
                image = client.images.get(tag)
                if progress:
                    progress(f"docker: built {tag} in {time.monotonic() - started:.1f} s")
        parent_ids = list(image.attrs["RootFS"]["Layers"])
    return tags[-1]


class _HashingWriter(io.RawIOBase):
    def __init__(self, f: Any) -> None:
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        self.f.write(data)
        self.sha.update(data)
        self.size += len(data)
        return len(data)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}.get(
        machine, machine
    )


def _tar_member(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(time.time())
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _pad(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _load_layer_image(
    client: docker.DockerClient, tag: str, layers: list[Path], parent_ids: list[str]
) -> None:
    """Build image ``tag`` = the parent's layers + the top of ``layers``, with one docker load."""
    top = layers[-1].resolve()
    tmp_dir = cache_root() / "docker" / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=tmp_dir) as layer_file:
        writer = _HashingWriter(layer_file)
        write_layer_tar(top, writer)
        diff_id = "sha256:" + writer.sha.hexdigest()
        size = writer.size
        diff_ids = [*parent_ids, diff_id]
        config = {
            "architecture": _arch(),
            "os": "linux",
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "config": {
                "Labels": {
                    IMAGE_LABEL: "1",
                    f"{IMAGE_LABEL}.digest": layers_digest(layers),
                    f"{IMAGE_LABEL}.top": str(top),
                }
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        config_bytes = json.dumps(config).encode()
        config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
        # lower layers are already in the daemon: docker load skips them without opening the file
        layer_names = [f"{d.split(':')[1]}/layer.tar" for d in diff_ids]
        manifest = json.dumps(
            [{"Config": config_name, "RepoTags": [tag], "Layers": layer_names}]
        ).encode()

        def archive() -> Iterator[bytes]:
            for name, data in ((config_name, config_bytes), ("manifest.json", manifest)):
                yield _tar_member(name, len(data)) + data + _pad(len(data))
            yield _tar_member(layer_names[-1], size)
            layer_file.seek(0)
            while chunk := layer_file.read(1 << 20):
                yield chunk
            yield _pad(size) + b"\0" * (2 * tarfile.BLOCKSIZE)

        try:
            for status in client.api.load_image(archive(), quiet=True) or []:
                if isinstance(status, dict) and (status.get("error") or status.get("errorDetail")):
                    raise SandboxStartError(f"docker load of {tag} failed: {status}")
        except SandboxStartError:
            raise
        except Exception as exc:
            raise SandboxStartError(f"docker load of {tag} (layer {top}) failed: {exc}") from exc
