"""The sandbox backends by name: one table from which the config type, the CLI help and gc derive.

A backend is a :class:`~sweflow.sandbox.base.Sandbox` subclass whose constructor takes a
:class:`~sweflow.sandbox.spec.SandboxSpec`. Register it here with one line (its module is
imported only when it is first used), or name it anywhere a backend is asked for by its dotted
path (``mypackage.sandboxes.MySandbox`` or ``mypackage.sandboxes:MySandbox``), as
mini-swe-agent does with its environments.
"""

from __future__ import annotations

from sweflow.registered import check_named, choices_help
from sweflow.sandbox.errors import SandboxConfigError

BACKENDS: dict[str, str] = {
    "local": "sweflow.sandbox.local:LocalSandbox",
    "docker": "sweflow.sandbox.docker:DockerSandbox",
    "e2b": "sweflow.sandbox.e2b:E2BSandbox",
    "scratch": "sweflow.sandbox.scratch:ScratchSandbox",  # isolates nothing: tests only
}
DEFAULT_BACKEND = "local"


def backends_help() -> str:
    """One line for option help: the registered names and the dotted-path form."""
    return choices_help(BACKENDS)


def check_backend_name(name: str) -> str:
    """``name`` if it is registered or looks like ``module:Class``; imports nothing."""
    return check_named("sandbox backend", name, BACKENDS, SandboxConfigError)
