"""The dataset and build plumbing that the commands working on a dataset share: its options
(``dataset_options`` and ``DatasetArgs``), loading its rows, and building their environments
with a progress bar."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from sweflow.cli.common import (
    WheelhouseOption,
    console,
    folder_or_new,
    image_source,
    option_group,
    positive,
    progress_bar,
)
from sweflow.errors import SweflowError

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor
    from sweflow.cluster.environments import BuildWork
    from sweflow.envcache.builder import BuildResult
    from sweflow.envcache.dataset import Dataset
    from sweflow.instances import Instance, RowError

DatasetOption = typer.Option(
    ...,
    "--dataset",
    "-d",
    help="JSON/JSONL/parquet file, task folder or Hugging Face id org/name[@revision][:split].",
)
SplitOption = typer.Option(None, "--split", help="Dataset split (HF datasets).")
SpecsOption = typer.Option(
    None,
    "--specs",
    help="Environment specs (YAML/JSON), or 'swebench' for the built-in SWE-bench table; "
    "default: specs.yaml beside the dataset, else the built-in table.",
)
MirrorOption = typer.Option(
    None,
    "--repo-mirror",
    help="Folder of git repos or bundles: <owner>__<name> or <owner>/<name>; "
    "default: repos/ beside the dataset, else the dataset's folder.",
)
RepoOption = typer.Option(None, "--repo", help="A local git repository (for single-repo datasets).")
RepoUrlOption = typer.Option(None, "--repo-url", help="A git URL to clone from.")
InstancesOption = typer.Option(
    None, "--instances", "-i", help="Only these instance ids: -i A -i B, or -i A,B."
)
StoreOption = typer.Option(
    ..., "--store", "-s", help="The layer store directory.", callback=folder_or_new
)
BaseOverride = typer.Option(
    None,
    "--base",
    help="Force a base (default: by the spec's python): debian:SUITE, docker:IMAGE (a daemon's), "
    "docker-archive:TAR[:REF] (docker save), oci:PATH[:REF] (OCI layout) or registry:REF, the "
    "image's layers imported into the store.",
)


ImagesOption = typer.Option(
    None,
    "--images",
    help="Rows with an image (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym, SWE-rebench: each "
    "format names its own) run on that image itself, its layers imported into the store: a "
    "folder of image archives (docker save, OCI layout) or registry:HOST[:PORT].",
    callback=image_source,
)


def _format_name(value: str) -> str:
    from sweflow.formats import FormatError, check_format_name

    try:
        return check_format_name(value)
    except FormatError as exc:
        raise typer.BadParameter(str(exc)) from None


FormatOption = typer.Option(
    "auto",
    "--format",
    metavar="NAME",
    help="The dataset's format: auto (detected per row from its columns), swebench, swe-gym, "
    "swe-smith, r2e-gym, swe-rebench, sweflow, or a dotted path module:Attr.",
    callback=_format_name,
)
WorkersOption = typer.Option(
    2, "--max-workers", "-j", help="Instances built at once.", callback=positive
)


class CliError(SweflowError):
    """A command-line input that cannot be used."""


def usable_rows(name: str | Path, rows: list[Instance], errors: list[RowError]) -> list[Instance]:
    """``rows``, the bad rows named (left out); a dataset with no usable row is refused."""
    err = Console(stderr=True)
    for error in errors:
        err.print(f"[yellow]skipped:[/] {error}", highlight=False)
    if not rows:
        raise CliError(f"no usable instances in {name}")
    return rows


def wanted_ids(ids: list[str] | None) -> list[str] | None:
    """``-i A -i B,C`` as ``[A, B, C]``; None when none are given."""
    return [i.strip() for value in ids or () for i in value.split(",") if i.strip()] or None


def load_dataset_rows(dataset: str, split: str | None, ids: list[str] | None) -> list[Instance]:
    """Only the dataset's rows (no specs: ``gc`` and the benchmarks' row counts), bad ones
    named and left out."""
    from sweflow.formats import row_mapper
    from sweflow.instances import load_instances

    result = load_instances(dataset, split, instances=wanted_ids(ids), mapper=row_mapper())
    return usable_rows(dataset, result.instances, result.errors)


@dataclass(frozen=True)
class DatasetArgs:
    """The dataset and build options that ``dataset_options`` gives a command."""

    dataset: str = field(metadata={"option": DatasetOption})
    split: str | None = field(metadata={"option": SplitOption})
    specs: Path | None = field(metadata={"option": SpecsOption})
    repo_mirror: Path | None = field(metadata={"option": MirrorOption})
    repo: Path | None = field(metadata={"option": RepoOption})
    repo_url: str | None = field(metadata={"option": RepoUrlOption})
    instances: list[str] | None = field(metadata={"option": InstancesOption})
    store: Path = field(metadata={"option": StoreOption})
    base: str | None = field(metadata={"option": BaseOverride})
    images: str | None = field(metadata={"option": ImagesOption})
    wheelhouse: Path | None = field(metadata={"option": WheelhouseOption})
    max_workers: int = field(metadata={"option": WorkersOption})
    format: str = field(default="auto", metadata={"option": FormatOption})

    def load(self) -> Dataset:
        """The dataset, read once (``read``), and the build's own first check
        (``repos.unbuildable_rows``: a repository or commit none of the rows the store lacks
        could be built from): what is checked before a build writes anything, so that
        ``sweflow --dry-run`` refuses what the run refuses, with the same error."""
        from sweflow.envcache.repos import unbuildable_rows
        from sweflow.envcache.store import LayerStore

        data = self.read()
        stored = LayerStore(self.store, create=False)
        needed = [r for r in data.rows if not (self.images and r.image)]
        needed = [r for r in needed if not stored.has_instance(r.instance_id)]
        unbuildable_rows(data.source, needed)
        return data

    def read(self) -> Dataset:
        """The dataset's specs, then its rows (bad ones named, left out)."""
        from sweflow.envcache.dataset import Dataset

        data = Dataset.load(
            self.dataset,
            specs=self.specs,
            mirror=self.repo_mirror,
            repo=self.repo,
            repo_url=self.repo_url,
            split=self.split,
            instances=wanted_ids(self.instances),
            strict=False,
            format=self.format,
        )
        usable_rows(data.name, data.rows, data.skipped)
        return data

    def build(
        self, data: Dataset, rows: list[Instance], executor: Executor | None = None
    ) -> list[Instance]:
        """``rows`` built where missing (``build_with_progress``); rows whose build failed are
        reported and left out."""
        results = self.build_with_progress(data, rows, executor)
        failed = {r.instance_id: r for r in results if r.status == "error"}
        for r in failed.values():
            console.print(f"[yellow]skipped (build failed):[/] {r.instance_id}: {r.error}")
        return [row for row in rows if row.instance_id not in failed]

    def build_with_progress(
        self, data: Dataset, rows: list[Instance], executor: Executor | None = None
    ) -> list[BuildResult]:
        """``rows`` built where missing on ``executor`` (this process's threads by default),
        with a progress bar: a result each, in order."""
        from sweflow.cluster.environments import build_instances
        from sweflow.cluster.local import LocalExecutor

        work = self.build_work(data)
        executor = executor or LocalExecutor(work.options.store.absolute())
        with progress_bar() as bar:
            task = bar.add_task("building environments", total=len(rows))

            def update(result: BuildResult) -> None:
                bar.update(task, advance=1, description=f"{result.status}: {result.instance_id}")

            return build_instances(executor, work, rows, on_done=update)

    def build_work(self, data: Dataset) -> BuildWork:
        """What builds one of ``data``'s rows on the store, with these options (the work an
        executor runs per instance)."""
        from sweflow.cluster.environments import BuildWork

        options = data.build_options(
            self.store,
            base=self.base,
            images=self.images,
            wheelhouse=self.wheelhouse,
            max_workers=self.max_workers,
        )
        return BuildWork(data.specs, options)


dataset_options = option_group(DatasetArgs)


def print_retries(executor: Executor) -> None:
    """Say which instances ran more than once (their node died) and where."""
    for retry in executor.retries():
        console.print(f"[yellow]retried:[/] {retry.item} (ran on {' then '.join(retry.nodes)})")
