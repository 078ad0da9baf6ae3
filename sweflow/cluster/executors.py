"""The executors by name: one table from which the pipeline config's choices, the CLI and the
stages derive. An executor is a class keeping :class:`~sweflow.cluster.base.Executor` whose
constructor takes the run's store and its own options as keywords; register it here with one
line (its module, and what it needs, is imported only when it is used)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.errors import ConfigError
from sweflow.registered import registered_name

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor

EXECUTORS: dict[str, str] = {
    "local": "sweflow.cluster.local:LocalExecutor",
    "ray": "sweflow.cluster.ray_executor:RayExecutor",
}
DEFAULT_EXECUTOR = "local"


def check_executor_name(name: str) -> str:
    if name not in EXECUTORS:
        raise ConfigError(f"executor: {name!r} is not one of {', '.join(EXECUTORS)}")
    return name


# The type of a config field that names an executor: the Prefect form offers the registered names.
ExecutorName = registered_name(check_executor_name, lambda: {"enum": list(EXECUTORS)})


def make_executor(name: str, store: Path, **options: Any) -> Executor:
    """The executor registered as ``name``, on ``store``, with its own ``options``."""
    module, _, attr = EXECUTORS[check_executor_name(name)].partition(":")
    return getattr(importlib.import_module(module), attr)(store, **options)
