"""The RL trainers by name: one table from which the ``rl.backend`` field (its check and the
choices the config form shows), the CLI help and the dispatch of a run
(sweflow.training.rl.backend.rl_backend) derive.

A backend is a class with the methods of :class:`~sweflow.training.rl.backend.RLBackend`,
built without arguments. Register it with one line; its module, and the stack it trains with,
is imported only when a run uses it.
"""

from __future__ import annotations

from sweflow.errors import ConfigError
from sweflow.registered import check_named, choices_help

RL_BACKENDS: dict[str, str] = {
    "trl": "sweflow.training.rl.trl_backend:TRLBackend",
    "verl": "sweflow.training.rl.verl_backend:VerlBackend",
    "skyrl": "sweflow.training.rl.skyrl_backend:SkyRLBackend",
}
DEFAULT_RL_BACKEND = "trl"


class RLBackendError(ConfigError):
    """An RL backend that is not registered, or whose module cannot be imported."""


def rl_backends_help() -> str:
    """One line for option help: the registered names and the dotted-path form."""
    return choices_help(RL_BACKENDS)


def check_rl_backend(name: str) -> str:
    """``name`` if it is registered or looks like ``module:Class``; imports nothing."""
    return check_named("RL backend", name, RL_BACKENDS, RLBackendError)
