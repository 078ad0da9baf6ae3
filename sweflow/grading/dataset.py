"""A dataset ready to grade: its rows, specs and repositories, and a builder on a layer store.

Datasets ship as ``tasks.jsonl`` with ``specs.yaml`` beside it and their repositories as git
bundles, either beside it (tests/data/envcache) or in ``repos/`` (data/demo): the builder finds
them as every command does (``sweflow.envcache.dataset``). Used by the grading tests, the
cross-check and the benchmarks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from sweflow.envcache.builder import BuildResult, EnvBuilder
from sweflow.envcache.dataset import dataset_builder
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance, load_instances


@dataclass
class GradingData:
    dataset: Path
    instances: list[Instance]
    specs: SpecTable
    builder: EnvBuilder

    @classmethod
    def load(
        cls,
        dataset: Path,
        store: Path,
        wheelhouse: Path | None = None,
        specs: Path | None = None,
        mirror: Path | None = None,
    ) -> GradingData:
        instances = load_instances(dataset).raise_for_errors()
        builder = dataset_builder(dataset, store, specs=specs, mirror=mirror, wheelhouse=wheelhouse)
        return cls(dataset, instances, builder.specs, builder)

    @property
    def store(self) -> Path:
        return self.builder.options.store

    def build(self) -> list[BuildResult]:
        return self.builder.build(self.instances)

    def sample(self, limit: int, exclude: Collection[str] = ()) -> list[Instance]:
        """Up to ``limit`` instances (all when 0), taking one from each repository in turn, so
        that a small sample still covers every project."""
        by_repo: dict[str, list[Instance]] = defaultdict(list)
        for i in self.instances:
            if i.instance_id not in exclude:
                by_repo[i.repo].append(i)
        rounds = zip_longest(*by_repo.values())
        return [i for round_ in rounds for i in round_ if i is not None][: limit or None]
