"""One sandbox protocol, several backends: ``local`` (container-free, the default), ``docker``.

from sweflow.sandbox import SandboxSpec, open_sandbox
with open_sandbox(SandboxSpec(layers=[rootfs], workdir="/testbed")) as sb:
    print(sb.exec("python -V").output)

Backends are registered by name in :mod:`sweflow.sandbox.backends`.
"""

from __future__ import annotations

from sweflow.sandbox.backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    BackendName,
    backend_class,
    backends_help,
)
from sweflow.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxConfigError,
    SandboxCrashError,
    SandboxError,
    SandboxFileError,
    SandboxStartError,
)
from sweflow.sandbox.spec import Bind, Limits, SandboxSpec


def open_sandbox(spec: SandboxSpec, backend: str = DEFAULT_BACKEND) -> Sandbox:
    """Open a sandbox for ``spec`` with the named backend (imported only when used)."""
    return backend_class(backend)(spec)


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "BackendName",
    "Bind",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxConfigError",
    "SandboxCrashError",
    "SandboxError",
    "SandboxFileError",
    "SandboxSpec",
    "SandboxStartError",
    "backend_class",
    "backends_help",
    "open_sandbox",
]
