"""What a sandbox is made of: layers, working directory, environment, limits, network.

One spec serves every backend, so a rollout that ran container-free runs the same way in docker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sweflow.registered import registered_name
from sweflow.sandbox.backends import BACKENDS, backends_help, check_backend_name

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Limits(BaseModel):
    """Resource caps. ``None`` means "no cap" for that resource."""

    model_config = ConfigDict(extra="forbid")

    memory_bytes: int | None = Field(4 << 30, gt=0, description="RAM (+swap) of the whole sandbox")
    pids: int | None = Field(1024, gt=0, description="processes and threads at once")
    cpus: float | None = Field(None, gt=0, description="CPU bandwidth, in cores")
    wall_time_s: float | None = Field(
        600.0, gt=0, description="default timeout of one exec() when the call gives none"
    )
    output_bytes: int = Field(1 << 20, gt=0, description="output kept per exec(); the rest is cut")
    tmp_bytes: int = Field(1 << 30, gt=0, description="size of the private /tmp")
    upper_bytes: int = Field(4 << 30, gt=0, description="size of the writable layer (tmpfs upper)")


class Bind(BaseModel):
    """A host directory made visible inside the sandbox (read-only unless asked)."""

    model_config = ConfigDict(extra="forbid")

    source: Path
    target: str
    read_only: bool = True

    @field_validator("target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"bind target must be absolute, got {value!r}")
        return value


class SandboxSpec(BaseModel):
    """Everything needed to open a sandbox.

    ``layers`` are read-only directories, lowest first (a base rootfs, then an environment, then
    the repository). ``upper`` chooses where writes go: ``tmpfs`` (fast, size-capped, gone on
    close) or ``disk`` (kept in ``upper_dir`` so a builder can capture it as a new layer).
    """

    model_config = ConfigDict(extra="forbid")

    layers: list[Path] = Field(min_length=1)
    workdir: str = "/"
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    network: bool = False
    hostname: str = "sandbox"
    binds: list[Bind] = Field(default_factory=list)
    upper: Literal["tmpfs", "disk"] = "tmpfs"
    upper_dir: Path | None = Field(
        None, description="with upper='disk': where the writable layer lives (kept after close)"
    )
    repo_base: str = Field("HEAD", description="git revision that diff() compares the workdir to")
    leases: list[Path] = Field(
        default_factory=list,
        description="lease files the sandbox holds (a shared flock) from before it reads a "
        "layer until it closes: a layer store's gc keeps the layers they name (see "
        "sweflow.sandbox.leases)",
    )
    template: str | None = Field(
        None,
        description="cloud backends (e2b): the template holding these layers; default: the "
        "layer directories themselves, which only sweflow's own endpoint can open",
    )

    @field_validator("workdir")
    @classmethod
    def _workdir_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"workdir must be absolute, got {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [key for key in value if not key.isidentifier()]
        if bad:
            raise ValueError(f"invalid environment variable name(s): {', '.join(map(repr, bad))}")
        return value

    @model_validator(mode="after")
    def _disk_upper_has_a_place(self) -> SandboxSpec:
        if self.upper == "disk" and self.upper_dir is None:
            raise ValueError("upper='disk' needs upper_dir (where the writable layer is kept)")
        return self

    def shell_env(self) -> dict[str, str]:
        """The environment the sandbox's shell starts with: sane defaults, then the spec's."""
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }
        env.update(self.env)
        return env


# The type of a config field that names a backend: the form shows the registered names.
BackendName = registered_name(
    check_backend_name,
    lambda: {"examples": list(BACKENDS), "description": backends_help()},
)
