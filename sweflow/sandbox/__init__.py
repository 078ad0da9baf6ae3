"""One sandbox protocol, several backends: ``local`` (container-free, the default), ``docker``.

from sweflow.sandbox import SandboxSpec, open_sandbox
with open_sandbox(SandboxSpec(layers=[rootfs], workdir="/testbed")) as sb:
    print(sb.exec("python -V").output)

Backends are registered by name in :mod:`sweflow.sandbox.backends`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sweflow.lazy import lazy_exports
from sweflow.sandbox.backends import DEFAULT_BACKEND

if TYPE_CHECKING:
    from sweflow.sandbox.base import Sandbox
    from sweflow.sandbox.spec import SandboxSpec

_EXPORTS = {
    "BACKENDS": "backends",
    "DEFAULT_BACKEND": "backends",
    "backend_class": "base",
    "backends_help": "backends",
    "ExecResult": "base",
    "Sandbox": "base",
    "SandboxConfigError": "errors",
    "SandboxCrashError": "errors",
    "SandboxError": "errors",
    "SandboxFileError": "errors",
    "SandboxStartError": "errors",
    "Bind": "spec",
    "Limits": "spec",
    "SandboxSpec": "spec",
    "BackendName": "spec",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)


def open_sandbox(spec: SandboxSpec, backend: str = DEFAULT_BACKEND) -> Sandbox:
    """Open a sandbox for ``spec`` with the named backend (imported only when used).

    The sandbox is tracked, so that Ctrl-C in :func:`~sweflow.sandbox.tracking.interruptible_map`
    closes it."""
    from sweflow.sandbox import tracking
    from sweflow.sandbox.base import backend_class

    tracking.refuse_if_interrupted()
    return tracking.track(backend_class(backend)(spec))


__all__ = sorted([*_EXPORTS, "open_sandbox"])
