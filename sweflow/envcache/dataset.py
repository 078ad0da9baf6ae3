"""From a dataset to its environments: where its specs and repositories are, and a builder.

The CLI (``-d``), the pipeline (``dataset.path``), the benchmarks and the grading tests all start
from a dataset and find what it brings by these rules, so a dataset means the same everywhere:

- specs: the file given (or ``swebench``, the built-in table), else ``specs.yaml`` beside the
  rows (inside a dataset folder), else the built-in SWE-bench table;
- repositories: the mirror given; else, unless a local repository or a git URL is given, the
  ``repos/`` folder beside the rows, or the rows' own folder when there is none (git bundles
  shipped beside the file); a dataset that is not a path (a Hugging Face name) has no mirror.

Light to import (the pipeline's config reads these rules): the builder is imported when one is
made.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.harness.specs import BUILTIN_SPECS, load_specs
from sweflow.instances import beside_dataset

if TYPE_CHECKING:
    from sweflow.envcache.builder import EnvBuilder


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


def dataset_builder(
    dataset: str | Path,
    store: Path,
    *,
    specs: Path | None = None,
    mirror: Path | None = None,
    repo_path: Path | None = None,
    repo_url: str | None = None,
    **options: Any,
) -> EnvBuilder:
    """A builder on ``store`` for ``dataset``'s rows, its specs and repositories found by the
    rules above; a local repository or a git URL replaces the default mirror. ``options`` are
    the rest of ``BuildOptions`` (base, images, wheelhouse, max_workers, timeout_s, network)."""
    from sweflow.envcache.builder import BuildOptions, EnvBuilder

    if repo_path is None and repo_url is None:
        mirror = dataset_mirror(dataset, mirror)
    build = BuildOptions(
        store=store, repo_mirror=mirror, repo_path=repo_path, repo_url=repo_url, **options
    )
    return EnvBuilder(load_specs(dataset_specs(dataset, specs)), build)
