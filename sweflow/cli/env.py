"""``sweflow env``: build, validate, enter and clean the environment cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sweflow.cli.common import (
    App,
    RayOption,
    WheelhouseOption,
    cli_executor,
    console,
    folder_or_new,
    option_group,
    path_name,
    positive,
    work_starts,
)
from sweflow.envcache.storefiles import LEASE_GRACE_S
from sweflow.errors import SweflowError

if TYPE_CHECKING:
    from sweflow.cluster.base import Executor
    from sweflow.envcache.builder import BuildResult, EnvBuilder
    from sweflow.instances import Instance

env_app = App(help="Build, validate and enter cached, layered environments of task instances.")

DatasetOption = typer.Option(
    ..., "--dataset", "-d", help="JSON/JSONL/parquet file, task folder or HF name."
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


def _image_source(value: str | None) -> str | None:
    if value is not None and not value.startswith("registry:") and not Path(value).is_dir():
        raise typer.BadParameter(f"{value} is neither a folder of image archives nor registry:HOST")
    return value


ImagesOption = typer.Option(
    None,
    "--images",
    help="Rows with an `image` (SWE-bench 5, SWE-Gym, SWE-smith) run on that image itself, "
    "its layers imported into the store: a folder of image archives (docker save, OCI layout) "
    "or registry:HOST[:PORT].",
    callback=_image_source,
)
WorkersOption = typer.Option(
    2, "--max-workers", "-j", help="Instances built at once.", callback=positive
)


class CliError(SweflowError):
    """A command-line input that cannot be used."""


def load_dataset_rows(dataset: str, split: str | None, ids: list[str] | None) -> list[Instance]:
    """Load the dataset, printing bad rows (named) and going on with the good ones."""
    from sweflow.instances import load_instances

    wanted = [i.strip() for value in ids or () for i in value.split(",") if i.strip()]
    result = load_instances(dataset, split, instances=wanted or None)
    err = Console(stderr=True)
    for error in result.errors:
        err.print(f"[yellow]skipped:[/] {error}", highlight=False)
    if not result.instances:
        raise CliError(f"no usable instances in {dataset}")
    return result.instances


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

    def rows(self) -> list[Instance]:
        """The dataset's rows (bad ones named, left out), its specs read: what is checked
        before a build writes anything."""
        from sweflow.harness.specs import load_specs

        load_specs(self.specs_path())
        return load_dataset_rows(self.dataset, self.split, self.instances)

    def specs_path(self) -> Path:
        from sweflow.envcache.dataset import dataset_specs

        return dataset_specs(self.dataset, self.specs)

    def builder(self) -> EnvBuilder:
        from sweflow.envcache.dataset import dataset_builder

        return dataset_builder(
            self.dataset,
            self.store,
            specs=self.specs,
            mirror=self.repo_mirror,
            repo_path=self.repo,
            repo_url=self.repo_url,
            base=self.base,
            images=self.images,
            wheelhouse=self.wheelhouse,
            max_workers=self.max_workers,
        )


dataset_options = option_group(DatasetArgs)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def build_with_progress(
    builder: EnvBuilder, instances: list[Instance], executor: Executor | None = None
) -> list[BuildResult]:
    """Build on ``executor`` (this process's threads by default) with a progress bar."""
    from sweflow.cluster.environments import BuildWork, build_instances
    from sweflow.cluster.local import LocalExecutor

    executor = executor or LocalExecutor(builder.store.root)
    with _progress() as bar:
        task = bar.add_task("building environments", total=len(instances))

        def update(result: BuildResult) -> None:
            bar.update(task, advance=1, description=f"{result.status}: {result.instance_id}")

        work = BuildWork(builder.specs, builder.options)
        return build_instances(executor, work, instances, on_done=update)


def print_retries(executor: Executor) -> None:
    """Say which instances ran more than once (their node died) and where."""
    for retry in executor.retries():
        console.print(f"[yellow]retried:[/] {retry.item} (ran on {' then '.join(retry.nodes)})")


def print_build_table(results: list[BuildResult]) -> None:
    table = Table(title="env build")
    for column in ("instance", "status", "seconds", "error / log"):
        table.add_column(column, overflow="fold")
    for r in results:
        style = {"error": "red", "built": "green"}.get(r.status, "")
        detail = f"{r.error} ({r.log_path})" if r.error else ""
        table.add_row(
            r.instance_id,
            f"[{style}]{r.status}[/]" if style else r.status,
            f"{r.seconds:.1f}",
            detail,
        )
    console.print(table)


@env_app.command("build")
@dataset_options
def env_build(
    data: DatasetArgs,
    pack: str = typer.Option(None, "--pack", help="Pack built layers: squashfs or erofs."),
    ray: str | None = RayOption,
) -> None:
    """Build (or find cached) the layers of every instance; exit 1 if any failed.

    Examples:
      sweflow env build -d data/demo --store store/
      sweflow env build -d tasks.jsonl --specs specs.yaml --repo-mirror mirrors/ -s store -i A,B
      sweflow env build -d data/demo --store store/ --ray 127.0.0.1:6379
    """
    if pack not in (None, "squashfs", "erofs"):
        raise CliError(f"--pack must be squashfs or erofs, not {pack!r}")
    if pack and ray:
        raise CliError("--pack packs this machine's store: not with --ray")
    rows = data.rows()
    work_starts(f"build {len(rows)} instance(s) into {data.store}")
    builder = data.builder()
    executor = cli_executor(ray, data.store)
    results = build_with_progress(builder, rows, executor)
    print_retries(executor)
    print_build_table(results)
    if pack:
        with console.status(f"packing layers as {pack}"):
            done = [r.instance_id for r in results if r.status != "error"]
            console.print(f"packed {builder.pack(done, pack)} layer(s) as {pack}")
    if any(r.status == "error" for r in results):
        raise typer.Exit(1)


@env_app.command("validate")
@dataset_options
def env_validate(
    data: DatasetArgs,
    out: Path = typer.Option(..., "--out", help="Where the validated dataset (JSONL) goes."),
    report: Path = typer.Option(
        ...,
        "--report",
        help="Folder for validation.json and validation.md.",
        callback=folder_or_new,
    ),
    runs: int = typer.Option(
        1, "--runs", help="Runs each way; more flag flaky tests.", callback=positive
    ),
    timeout: float = typer.Option(
        1800.0, "--timeout", help="Seconds per test run.", callback=positive
    ),
    ray: str | None = RayOption,
) -> None:
    """Build what is missing, then check each instance's tests both ways in fresh sandboxes.

    Examples:
      sweflow env validate -d data/demo --store store/ --out valid.jsonl --report report/ --runs 2
      sweflow env validate -d data/demo --store store/ --out v.jsonl --report r/ --ray auto
    """
    from sweflow.cluster.environments import BuildWork, ValidateWork, validate_instances
    from sweflow.envcache.validate import write_outputs

    rows = data.rows()
    work_starts(f"build and validate {len(rows)} instance(s) in {data.store}")
    builder = data.builder()
    executor = cli_executor(ray, data.store)
    build_with_progress(builder, rows, executor)
    work = ValidateWork(BuildWork(builder.specs, builder.options), runs, timeout)
    with _progress() as bar:
        task = bar.add_task("validating", total=len(rows))
        results = validate_instances(
            executor,
            work,
            rows,
            report / "logs",
            on_done=lambda r: bar.update(
                task, advance=1, description=f"{r.outcome}: {r.instance_id}"
            ),
        )
    print_retries(executor)
    write_outputs(results, rows, out, report)
    table = Table(title="env validate")
    for column in ("instance", "outcome", "reason"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(r.instance_id, r.outcome, r.reason)
    console.print(table)
    console.print(f"validated dataset: {out}   report: {report / 'validation.md'}")


@env_app.command("shell")
def env_shell(
    instance_id: str = typer.Argument(..., help="The instance to enter.", callback=path_name),
    store: Path = StoreOption,
) -> None:
    """An interactive shell in a fresh sandbox of a built instance (removed on exit).

    Example:
      sweflow env shell pypi__parse-1.20.2.invert_if_else__ddb8ebd9 --store store/
    """
    from sweflow.envcache.builder import instance_sandbox_spec
    from sweflow.envcache.store import LayerStore
    from sweflow.sandbox import open_sandbox

    work_starts(f"open a shell on {instance_id} of {store}")
    with open_sandbox(instance_sandbox_spec(LayerStore(store), instance_id)) as sandbox:
        code = sandbox.terminal()
    raise typer.Exit(code)


@env_app.command("gc")
def env_gc(
    store: Path = StoreOption,
    dataset: str = typer.Option(
        None, "--dataset", "-d", help="Keep only this dataset's instances."
    ),
    split: str = SplitOption,
    grace: float = typer.Option(
        LEASE_GRACE_S,
        "--grace",
        help="Seconds after its last use that an instance's spec or build still counts as in "
        "use (a sandbox about to open on it); open sandboxes are always in use.",
        min=0.0,
    ),
) -> None:
    """Remove layers no manifest needs (and manifests not in --dataset), with the bytes freed.

    What is in use is kept and said: layers of open sandboxes (in any process), and instances
    whose spec was handed out or that were built in the last few minutes.

    Examples:
      sweflow env gc --store store/
      sweflow env gc --store store/ -d data/demo/tasks.jsonl
      sweflow env gc --store store/ --grace 0   # all but the layers of open sandboxes
    """
    from sweflow.envcache.cleanup import gc
    from sweflow.envcache.store import LayerStore

    keep = {i.instance_id for i in load_dataset_rows(dataset, split, None)} if dataset else None
    work_starts(f"remove what no manifest{' of ' + dataset if dataset else ''} needs from {store}")
    report = gc(LayerStore(store), keep, grace_s=grace)
    for what, items in (("manifest", report.manifests), ("layer", report.layers)):
        for item in items:
            console.print(f"removed {what} {item}", highlight=False)
    for iid in report.in_use_instances:
        console.print(f"kept manifest {iid}: in use", highlight=False)
    for digest, users in report.in_use.items():
        console.print(f"kept layer {digest}: in use by {', '.join(users)}", highlight=False)
    console.print(report.summary(), highlight=False)


def _a_store(value: Path) -> Path:
    """A store option for commands that only read or rework a store: it must already be one."""
    if not (value / "layers").is_dir() or not (value / "manifests").is_dir():
        raise typer.BadParameter(f"{value} is not a layer store (no layers/ and manifests/ in it)")
    return value


ExistingStoreOption = typer.Option(
    ..., "--store", "-s", help="The layer store directory.", callback=_a_store
)


@contextmanager
def _layer_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar over a store's layers, and the ``progress(done, total)`` that moves it."""
    with _progress() as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f}"


@env_app.command("du")
def env_du(
    store: Path = ExistingStoreOption,
    top: int = typer.Option(
        10, "--top", help="Show this many instances that cost the most.", min=0
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
) -> None:
    """Where the store's bytes are: each file counted once (the pool shares files between
    layers), by layer kind, with what each instance alone costs.

    Examples:
      sweflow env du --store store/
      sweflow env du --store store/ --top 0 --json
    """
    from sweflow.envcache.diskusage import disk_usage
    from sweflow.envcache.store import LayerStore

    work_starts(f"count the bytes of {store}")
    if json_out:  # the figures alone on stdout
        usage = disk_usage(LayerStore(store))
    else:
        with _layer_bar("walking layers") as progress:
            usage = disk_usage(LayerStore(store), progress=progress)
    costly = sorted(usage.instance_own_bytes.items(), key=lambda item: -item[1])[:top]
    if json_out:
        report = usage.model_dump(exclude={"instance_own_bytes"})
        report |= {
            "mb_per_instance": usage.mb_per_instance,
            "files_deduplicated_pct": usage.files_deduplicated_pct,
            "costliest_instances": dict(costly),
        }
        console.print_json(data=report)
        return
    table = Table(title=f"env du {store}")
    for column in ("layers", "count", "files", "as whole trees MB", "only theirs MB"):
        table.add_column(column, justify="left" if column == "layers" else "right")
    for kind, row in usage.by_kind.items():
        table.add_row(kind, str(row.layers), f"{row.files:,}", _mb(row.apparent_bytes),
                      _mb(row.own_bytes))  # fmt: skip
    table.add_row("shared by several", "", "", "", _mb(usage.shared_bytes))
    for kinds, nbytes in usage.shared_by_kinds.items():
        *most, last = kinds.split("+")
        who = f"{', '.join(most)} and {last}" if most else last
        table.add_row(f"  by {who} layers", "", "", "", _mb(nbytes))
    table.add_row("[bold]on disk[/]", str(usage.layers), f"{usage.distinct_files:,}",
                  _mb(usage.apparent_bytes), f"[bold]{_mb(usage.disk_bytes)}[/]")  # fmt: skip
    console.print(table)
    per = usage.mb_per_instance
    dedup = usage.files_deduplicated_pct
    console.print(
        f"{usage.instances} instances, {per or 0:.1f} MB each on disk; "
        f"{dedup or 0:.1f}% of files stored once for several layers; "
        f"{usage.pool_files:,} files in the pool",
        highlight=False,
    )
    if costly:
        table = Table(title="what each instance alone costs (its own layers, less what it shares)")
        table.add_column("instance")
        table.add_column("MB", justify="right")
        for instance_id, nbytes in costly:
            table.add_row(instance_id, _mb(nbytes))
        console.print(table)


@env_app.command("dedupe")
def env_dedupe(store: Path = ExistingStoreOption) -> None:
    """Store each distinct file of the layers once: link the files of layers built before the
    file pool, or before its rules changed, to it as a build now would (new layers are pooled as
    they are committed), and remove the pool's entries no layer links. Safe to run again.

    Builds and gc wait while it runs; open sandboxes keep reading the same bytes.

    Example:
      sweflow env dedupe --store store/
    """
    from sweflow.envcache.cleanup import pool_layers
    from sweflow.envcache.store import LayerStore

    work_starts(f"link the files of every layer of {store} to its file pool")
    with _layer_bar("pooling layers") as progress:
        report = pool_layers(LayerStore(store), progress=progress)
    for digest in report.changed:
        console.print(
            f"[yellow]left alone:[/] layer {digest}: its files no longer have its digest "
            "(something wrote into it); rebuild the instances that use it",
            highlight=False,
        )
    console.print(
        f"pooled {report.layers} layers: {report.shared:,} of {report.files:,} files are now "
        f"stored once for several layers, {report.given_back / 1e6:,.1f} MB given back",
        highlight=False,
    )
