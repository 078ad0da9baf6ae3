"""From a dataset to its environments: where its specs and repositories are, and a builder.

The CLI (``-d``), the pipeline (``dataset.path``), the benchmarks and the grading tests all start
from a dataset and find what it brings by these rules, so a dataset means the same everywhere:

- specs: the file given (or ``swebench``, the built-in table), else ``specs.yaml`` beside the
  rows (inside a dataset folder), else the built-in SWE-bench table;
- repositories: the mirror given; else, unless a local repository or a git URL is given, the
  ``repos/`` folder beside the rows, or the rows' own folder when there is none (git bundles
  shipped beside the file); a dataset that is not a path (a Hugging Face name) has no mirror;
- format: named, or detected per row (``sweflow.formats``); each row's format adds its
  container-free recipes to the specs (SWE-Gym's, SWE-smith's, SWE-rebench's) and names its
  image (``Instance.image``), which a build with ``images`` uses.

A :class:`Dataset` is these found and read once (rows, specs table, repositories). Light to
import (the pipeline's config reads these rules): the builder is imported when one is made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.envcache.repos import RepoSource
from sweflow.formats import AUTO, recipes_for, row_mapper
from sweflow.harness.specs import BUILTIN_SPECS, SpecTable, load_specs
from sweflow.instances import Instance, RowError, beside_dataset, load_instances

if TYPE_CHECKING:
    from sweflow.envcache.builder import BuildOptions, EnvBuilder


def dataset_specs(dataset: str | Path, specs: Path | None = None) -> Path:
    """The specs file of ``dataset``: ``specs`` when given, else ``specs.yaml`` beside the rows,
    else ``swebench`` (the built-in table, as ``load_specs`` reads that name)."""
    if specs is not None:
        return specs
    found = beside_dataset(dataset, "specs.yaml")
    return found if found.exists() else Path(BUILTIN_SPECS)


def dataset_mirror(dataset: str | Path, mirror: Path | None = None) -> Path | None:
    """The folder of ``dataset``'s repositories: ``mirror`` when given, else ``repos/`` beside
    the rows, else the rows' own folder; None for a dataset that is not a path."""
    if mirror is not None:
        return mirror
    if not Path(dataset).expanduser().exists():
        return None
    repos = beside_dataset(dataset, "repos")
    return repos if repos.is_dir() else repos.parent


def dataset_source(
    dataset: str | Path,
    mirror: Path | None = None,
    repo_path: Path | None = None,
    repo_url: str | None = None,
) -> RepoSource:
    """Where ``dataset``'s repositories come from: a local repository or a git URL when given,
    else its mirror by the rules above."""
    if repo_path is None and repo_url is None:
        mirror = dataset_mirror(dataset, mirror)
    return RepoSource(mirror=mirror, local=repo_path, url=repo_url)


@dataclass(frozen=True)
class Dataset:
    """A dataset loaded once: its rows, its specs table and where its repositories come from.

    Made by :meth:`load` (the one reader of a dataset's specs) and passed as a value to what
    builds, grades, trains or benchmarks on it; ``specs_file`` is what the table was read from,
    for cache keys and for processes that read it again (``Dataset.load`` there too)."""

    name: str | Path  # as given: a file, a folder or a Hugging Face name
    rows: list[Instance]
    specs: SpecTable
    specs_file: Path
    source: RepoSource
    skipped: list[RowError] = field(default_factory=list)  # bad rows left out (not strict)

    @classmethod
    def load(
        cls,
        dataset: str | Path,
        *,
        specs: Path | None = None,
        mirror: Path | None = None,
        repo: Path | None = None,
        repo_url: str | None = None,
        split: str | None = None,
        instances: Sequence[str] | None = None,
        limit: int | None = None,
        strict: bool = True,
        format: str = AUTO,
    ) -> Dataset:
        """Read ``dataset``'s specs (first: a bad specs file is told before any row), then its
        rows (only ``instances`` when given, the first ``limit``) as ``format`` (``auto``:
        each row's own); ``strict`` refuses bad rows (InstancesError naming each), else they
        are left out and kept in ``skipped``. The specs are the file's over the recipes of the
        rows' formats."""
        specs_file = dataset_specs(dataset, specs)
        table = load_specs(specs_file)
        result = load_instances(dataset, split, instances=instances, mapper=row_mapper(format))
        rows = result.raise_for_errors() if strict else result.instances
        rows = rows[:limit] if limit else rows
        return cls(
            dataset,
            rows,
            recipes_for(rows).merge(table),
            specs_file,
            dataset_source(dataset, mirror, repo, repo_url),
            [] if strict else result.errors,
        )

    def build_options(self, store: Path, **options: Any) -> BuildOptions:
        """How these rows build on ``store``: from these repositories; ``options`` are the rest
        of ``BuildOptions`` (base, images, wheelhouse, max_workers, timeout_s, network)."""
        from sweflow.envcache.builder import BuildOptions

        return BuildOptions(
            store=store,
            repo_mirror=self.source.mirror,
            repo_path=self.source.local,
            repo_url=self.source.url,
            **options,
        )

    def builder(self, store: Path, **options: Any) -> EnvBuilder:
        """A builder on ``store`` for these rows' specs and repositories (``build_options``)."""
        from sweflow.envcache.builder import EnvBuilder

        return EnvBuilder(self.specs, self.build_options(store, **options))

    def sample(self, limit: int, exclude: Collection[str] = ()) -> list[Instance]:
        """Up to ``limit`` rows (all when 0), one from each repository in turn."""
        return across_repos(self.rows, limit, exclude)


def across_repos(rows: list[Instance], limit: int, exclude: Collection[str] = ()) -> list[Instance]:
    """Up to ``limit`` of ``rows`` not in ``exclude`` (all when 0), taking one from each
    repository in turn, so that a small sample still covers every project."""
    kept = [row for row in rows if row.instance_id not in exclude]
    return in_turn(kept, lambda row: row.repo)[: limit or None]


def in_turn(rows: list[Instance], key: Callable[[Instance], str]) -> list[Instance]:
    """``rows`` taking one of each ``key`` in turn, each key's rows in their order."""
    queues: dict[str, list[Instance]] = defaultdict(list)
    for row in rows:
        queues[key(row)].append(row)
    return [row for round_ in zip_longest(*queues.values()) for row in round_ if row is not None]
