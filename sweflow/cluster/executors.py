"""The executors by name: one table from which the pipeline config's choices, the CLI and the
stages derive. An executor is a class keeping :class:`~sweflow.cluster.base.Executor` whose
constructor takes the run's store and its own options as keywords; register it here with one
line (its module, and what it needs, is imported only when it is used)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

from sweflow.errors import ConfigError

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


def _config_name(name: str) -> str:
    try:
        return check_executor_name(name)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


# The type of a config field that names an executor: the Prefect form offers the registered names.
ExecutorName = Annotated[
    str,
    AfterValidator(_config_name),
    WithJsonSchema({"type": "string", "enum": list(EXECUTORS)}),
]


def make_executor(name: str, store: Path, **options: Any) -> Executor:
    """The executor registered as ``name``, on ``store``, with its own ``options``."""
    module, _, attr = EXECUTORS[check_executor_name(name)].partition(":")
    return getattr(importlib.import_module(module), attr)(store, **options)
