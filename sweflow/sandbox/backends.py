"""The sandbox backends by name: one table from which the config type, the CLI help and gc derive.

A backend is a :class:`~sweflow.sandbox.base.Sandbox` subclass whose constructor takes a
:class:`~sweflow.sandbox.spec.SandboxSpec`. Register it here with one line (its module is
imported only when it is first used), or name it anywhere a backend is asked for by its dotted
path (``mypackage.sandboxes.MySandbox`` or ``mypackage.sandboxes:MySandbox``), as
mini-swe-agent does with its environments.
"""

from __future__ import annotations

from sweflow.sandbox.errors import SandboxConfigError

BACKENDS: dict[str, str] = {
    "local": "sweflow.sandbox.local:LocalSandbox",
    "docker": "sweflow.sandbox.docker:DockerSandbox",
    "e2b": "sweflow.sandbox.e2b:E2BSandbox",
}
DEFAULT_BACKEND = "local"


def backends_help() -> str:
    """One line for option help: the registered names and the dotted-path form."""
    return f"{' | '.join(BACKENDS)}, or a dotted path to a Sandbox class"


def import_path(name: str) -> tuple[str, str]:
    """The module and attribute a registered name or a dotted path points at."""
    path = BACKENDS.get(name, name)
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    return module, attr


def check_backend_name(name: str) -> str:
    """``name`` if it is registered or looks like ``module.Class``; imports nothing."""
    if name in BACKENDS:
        return name
    module, attr = import_path(name)
    if not module or not attr.isidentifier():
        raise SandboxConfigError(
            f"unknown sandbox backend {name!r}; choose one of {backends_help()}"
        )
    return name
