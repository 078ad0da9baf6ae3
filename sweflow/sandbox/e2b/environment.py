"""Environments in an E2B cloud: the layers above a base template, carried as docker-form tars.

A cloud cannot mount this host's layer directories. The user names a template that holds the
stack's lowest layer, the base rootfs (``SWEFLOW_E2B_BASE_TEMPLATE``); the layers above it travel
as docker-form tars (:mod:`sweflow.sandbox.layertar`, cached here by content) and are applied
inside by ``APPLY``, whiteouts and opaque directories included. ``SWEFLOW_E2B_ENVIRONMENT``
picks how:

- ``template`` (the default): once per layer stack, a template is built with the SDK's template
  build (from the base template: COPY the tars, RUN the apply script) and named by the stack's
  digest, ``sweflow-<digest>``; every open then starts from it like from any template.
- ``upload``: every open starts the base template, uploads the tars and applies them.

Without a base template the layer directories themselves are the template (``layers:A:B``),
which only ``sweflow sandbox serve-e2b`` on this machine can open.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sweflow.paths import cache_root
from sweflow.sandbox.errors import SandboxConfigError, SandboxStartError
from sweflow.sandbox.layertar import file_lock, layer_fingerprint, write_layer_tar
from sweflow.sandbox.spec import SandboxSpec

ENV_FORMAT = "sweflow-e2b-env-v1"  # part of every template name: bump it to rebuild them all
ENV_DIR = "/var/tmp/.sweflow-env"  # not /tmp: sandboxes mount a fresh tmpfs there
BASE_TEMPLATE_VAR = "SWEFLOW_E2B_BASE_TEMPLATE"
ENVIRONMENT_VAR = "SWEFLOW_E2B_ENVIRONMENT"
Mode = Literal["layers", "template", "upload"]
_KNOWN: set[str] = set()  # templates this process has seen exist: asked once, not per open

# Apply docker-form layer tars at /: deletions first (a whiteout removes the path below it, an
# opaque marker empties its directory), then the layer's files; existing directories keep their
# metadata (/proc and /tmp are not the layer's to change).
APPLY = r"""set -eu
for t in "$@"; do
  tar -tzf "$t" | while IFS= read -r m; do
    case "/$m" in
      */.wh..wh..opq) find "$(dirname "/$m")" -mindepth 1 -maxdepth 1 -exec rm -rf {} + ;;
      */.wh.*) b=$(basename "$m"); rm -rf "$(dirname "/$m")/${b#.wh.}" ;;
    esac
  done
  tar -xzf "$t" -C / --numeric-owner --no-overwrite-dir --exclude='.wh.*'
done
"""


@dataclass(frozen=True)
class Environment:
    """How a spec's layers reach the cloud: ``mode``, the base template, the layers above it,
    and the resources a template built for them asks for (E2B sets CPU and memory per template)."""

    mode: Mode
    base: str
    layers: tuple[Path, ...]
    cpu_count: int | None = None
    memory_mb: int | None = None

    @property
    def template_name(self) -> str:
        """The built template of this stack: base, resources and the layers' fingerprints."""
        asked = f"{ENV_FORMAT}\0{self.base}\0{self.cpu_count}\0{self.memory_mb}"
        h = hashlib.sha256(asked.encode())
        for layer in self.layers:
            h.update(b"\0" + layer_fingerprint(layer).encode())
        return f"sweflow-{h.hexdigest()[:16]}"


def environment_for(spec: SandboxSpec) -> Environment | None:
    """The spec's environment in the cloud; None when ``spec.template`` already holds it all."""
    if spec.template:
        return None
    base = os.environ.get(BASE_TEMPLATE_VAR, "").strip()
    mode = os.environ.get(ENVIRONMENT_VAR, "").strip() or "template"
    if mode not in ("template", "upload"):
        raise SandboxConfigError(f"{ENVIRONMENT_VAR} must be template or upload, got {mode!r}")
    layers = tuple(layer.resolve() for layer in spec.layers)
    if Path("/") in layers:
        raise SandboxConfigError("the host's / as a layer is not supported by the e2b backend")
    if not base:
        return Environment("layers", "layers:" + ":".join(map(str, layers)), layers)
    limits = spec.limits
    cpus = math.ceil(limits.cpus) if limits.cpus else None
    memory = max(128, (limits.memory_bytes >> 20) // 2 * 2) if limits.memory_bytes else None
    return Environment(mode, base, layers[1:], cpus, memory)  # type: ignore[arg-type]


def archive_dir() -> Path:
    path = cache_root() / "e2b" / "archives"
    path.mkdir(parents=True, exist_ok=True)
    return path


def layer_archive(layer: Path) -> Path:
    """The layer's docker-form tar, gzipped, made once per content (its fingerprint)."""
    key = hashlib.sha256(f"{layer}\0{layer_fingerprint(layer)}".encode()).hexdigest()[:16]
    path = archive_dir() / f"layer-{key}.tar.gz"
    with file_lock("e2b", path.name):
        if not path.exists():
            part = path.with_name(path.name + ".part")
            with open(part, "wb") as raw:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as packed:
                    write_layer_tar(layer, packed)
            part.rename(path)
    return path


def apply_command(paths: list[str]) -> str:
    return f"sh -c {shlex.quote(APPLY)} apply {shlex.join(paths)} && rm -rf {ENV_DIR}"


def ensure_template(e2b: Any, env: Environment) -> str:
    """The name of ``env``'s template, built with the SDK's template build when missing."""
    name = env.template_name
    if name in _KNOWN:
        return name
    with file_lock("e2b", name):
        try:
            if e2b.Template.exists(name):
                _KNOWN.add(name)
                return name
            archives = [layer_archive(layer) for layer in env.layers]
            template = e2b.Template(file_context_path=archive_dir()).from_template(env.base)
            if archives:
                template = template.copy([a.name for a in archives], ENV_DIR + "/", user="root")
                template = template.run_cmd(
                    apply_command([f"{ENV_DIR}/{a.name}" for a in archives]), user="root"
                )
            e2b.Template.build(template, name, cpu_count=env.cpu_count, memory_mb=env.memory_mb)
        except Exception as exc:
            raise SandboxStartError(f"e2b template {name} could not be built: {exc}") from exc
    _KNOWN.add(name)
    return name


def upload_environment(sandbox: Any, env: Environment) -> None:
    """Upload ``env``'s layers into a sandbox started from its base template and apply them."""
    remote = []
    for layer in env.layers:
        archive = layer_archive(layer)
        with open(archive, "rb") as f:
            sandbox.files.write(f"{ENV_DIR}/{archive.name}", f, user="root")
        remote.append(f"{ENV_DIR}/{archive.name}")
    if remote:
        sandbox.commands.run(apply_command(remote), user="root", timeout=0)
