"""The executors by name: one table from which the pipeline config's choices, the CLI and the
stages derive. An executor is a class keeping :class:`~sweflow.cluster.base.Executor` whose
constructor takes the run's store and its own options as keywords; register it here with one
line (its module, and what it needs, is imported only when it is used), or name it by its
dotted path (``mypackage.mod:MyExecutor``). An executor with options has a config model of them
here too: the pipeline config holds them under the executor's name (``executor.ray``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from sweflow.configfile import ConfigModel
from sweflow.errors import ConfigError
from sweflow.registered import check_named, load_named, registered_name

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor

EXECUTORS: dict[str, str] = {
    "local": "sweflow.cluster.local:LocalExecutor",
    "ray": "sweflow.cluster.ray_executor:RayExecutor",
}
DEFAULT_EXECUTOR = "local"
# The executors that can wait (for a node with a free slot) and say so through ``notify``.
NOTIFYING = frozenset({"ray"})


class RaySettings(ConfigModel):
    """Executor ray's options (``executor.ray``): the cluster it joins (nodes started with
    ``sweflow ray start``) and how its work is placed."""

    address: str | None = Field(
        None, description="HOST:PORT of the head, or auto; None: a Ray started on this machine"
    )
    slots_per_task: float = Field(1.0, gt=0, description="sweflow_slot each instance takes")
    max_retries: int = Field(3, ge=0, description="re-runs of an instance whose node died")
    wait_timeout_s: float = Field(
        600.0, gt=0, description="fail when work waits this long and none can start"
    )


def check_executor_name(name: str) -> str:
    """``name`` if it is registered or looks like ``module:Class``; imports nothing."""
    return check_named("executor", name, EXECUTORS, ConfigError)


# The type of a config field that names an executor: the Prefect form offers the registered names.
ExecutorName = registered_name(check_executor_name, lambda: {"enum": list(EXECUTORS)})


def make_executor(
    name: str, store: Path, *, notify: Callable[[str], None] | None = None, **options: Any
) -> Executor:
    """The executor registered as ``name`` (or at the dotted path ``name``), on ``store``, with
    its own ``options``; ``notify`` is where it says what it waits for, if it is one that waits
    (``NOTIFYING``; by default they write to stderr)."""
    if notify is not None and name in NOTIFYING:
        options["notify"] = notify
    return load_named("executor", name, EXECUTORS)(store, **options)
