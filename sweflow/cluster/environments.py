"""Building and validating instances one at a time, on whichever node an executor picks.

``BuildWork`` and ``ValidateWork`` are the picklable per-instance work of the build and validate
stages (see sweflow.cluster.base): they carry the spec table and build options, and on the
node make (once per process and store) an EnvBuilder on that node's own store. An instance the
node lacks is brought from a peer node when one has it, else built here, so validation runs on
any node whatever happened to the node that built it.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from sweflow.cluster.base import Executor, Node
from sweflow.envcache.builder import BuildOptions, BuildResult, EnvBuilder
from sweflow.envcache.validate import Validation, validate_one
from sweflow.errors import ConfigError
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance

_builders: dict[str, EnvBuilder] = {}
_builders_guard = threading.Lock()


def _builder(specs: SpecTable, options: BuildOptions) -> EnvBuilder:
    """One builder per process and settings: its locks make shared layers once per process."""
    key = options.model_dump_json() + specs.digest()
    with _builders_guard:
        if key not in _builders:
            _builders[key] = EnvBuilder(specs, options)
        return _builders[key]


@dataclass
class BuildWork:
    """Build (or find) one instance; its build log goes to ``out``."""

    specs: SpecTable
    options: BuildOptions

    def builder(self, node: Node, instance: Instance | None = None) -> EnvBuilder:
        """This node's builder; with ``instance``, which it then has if a peer had it."""
        builder = _builder(self.specs, self.options.model_copy(update={"store": node.store}))
        if instance is not None and not builder.store.has_instance(instance.instance_id):
            node.fetch(builder.store, instance.instance_id)
        return builder

    def unbuildable(self, instances: Sequence[Instance]) -> dict[str, BuildResult]:
        """The build's first check on this process's store (``EnvBuilder.unbuildable``)."""
        return _builder(self.specs, self.options).unbuildable(instances)

    @contextmanager
    def ensured(self, instance: Instance, node: Node) -> Iterator[tuple[EnvBuilder, BuildResult]]:
        """The instance on this node: found, brought from a peer (``cached``), or built; its
        lease held until the block ends (``EnvBuilder.build_held``), so that no gc, whatever
        its grace, removes it before the block's grading or validation has its sandbox."""
        builder = self.builder(node, instance)
        result, held = builder.build_held(instance)
        try:
            yield builder, result
        finally:
            if held is not None:
                held.release()

    def __call__(self, instance: Instance, out: Path, node: Node) -> BuildResult:
        builder = self.builder(node, instance)
        result = builder.build_one(instance)
        log = builder.log_path(instance.instance_id)
        kept = out / log.name
        if log.exists() and log.resolve() != kept.resolve():
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, kept)
        return replace(result, log_path=str(kept))


@dataclass
class ValidateWork:
    """Validate one instance both ways (built first where needed); logs under ``out/<id>``."""

    build: BuildWork
    runs: int = 1
    timeout: float = 1800.0

    def __post_init__(self) -> None:
        for name in ("runs", "timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"validate: {name} must be positive, got {getattr(self, name)}")

    def __call__(self, instance: Instance, out: Path, node: Node) -> Validation:
        with self.build.ensured(instance, node) as (builder, built):
            prepared = builder.prepare_validation(instance, built)
            return validate_one(prepared, out, self.runs, self.timeout)


def build_instances(
    executor: Executor,
    work: BuildWork,
    instances: Sequence[Instance],
    *,
    on_done: Callable[[BuildResult], None] | None = None,
) -> list[BuildResult]:
    """Every instance built (in order); one whose repository has no source is an error naming
    it, and nothing is built when no repository has one."""
    failed = work.unbuildable(instances)
    for result in failed.values():
        if on_done:
            on_done(result)
    buildable = [i for i in instances if i.instance_id not in failed]
    logs = work.options.store / "logs"
    built = iter(
        executor.map(
            work,
            buildable,
            [logs] * len(buildable),
            keys=[i.instance_id for i in buildable],
            max_workers=work.options.max_workers,
            on_done=on_done,
        )
    )
    return [failed.get(i.instance_id) or next(built) for i in instances]


def validate_instances(
    executor: Executor,
    work: ValidateWork,
    instances: Sequence[Instance],
    log_root: Path,
    *,
    on_done: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Every instance validated (in order), logs under ``log_root/<instance_id>``."""
    return executor.map(
        work,
        list(instances),
        [log_root] * len(instances),
        keys=[i.instance_id for i in instances],
        max_workers=work.build.options.max_workers,
        on_done=on_done,
    )
