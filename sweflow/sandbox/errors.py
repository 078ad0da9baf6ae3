"""What can go wrong with a sandbox, by kind: the kind tells a caller whether to retry (an
infrastructure failure) or not (a configuration error). Kept apart from the protocol so that the
backend table and the spec can name these errors without importing the protocol."""

from __future__ import annotations

from sweflow.errors import ConfigError, InfrastructureError, SweflowError


class SandboxError(SweflowError):
    """A sandbox could not be opened or used (the message says what is missing).

    Raised as one of its subclasses, which tell a caller whether to retry.
    """


class SandboxConfigError(SandboxError, ConfigError):
    """The spec, the backend or a call's arguments cannot work here: retrying changes nothing."""


class SandboxFileError(SandboxError):
    """A read or write of one path failed (missing, not a regular file, too large): the caller's
    business (the agent's editor shows it to the model), not a fault of the sandbox."""


class SandboxStartError(SandboxError, InfrastructureError):
    """The sandbox would not start (init failed, daemon unreachable, no answer in time)."""


class SandboxCrashError(SandboxError, InfrastructureError):
    """The sandbox died, was closed or lost its shell while in use."""
