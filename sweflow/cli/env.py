"""``sweflow env``: build, validate, enter and clean the environment cache."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from sweflow.cli.common import (
    App,
    ExecutorOption,
    cli_executor,
    console,
    folder_or_new,
    non_negative,
    path_name,
    positive,
    progress_bar,
    work_starts,
)
from sweflow.cli.datasets import (
    CliError,
    DatasetArgs,
    SplitOption,
    StoreOption,
    dataset_options,
    load_dataset_rows,
    print_retries,
)
from sweflow.envcache.storefiles import LEASE_GRACE_S
from sweflow.progress import Progress

if TYPE_CHECKING:
    from sweflow.envcache.builder import BuildResult

env_app = App(help="Build, validate and enter cached, layered environments of task instances.")


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
    executor_name: str | None = ExecutorOption,
) -> None:
    """Build (or find cached) the layers of every instance; exit 1 if any failed.

    Examples:
      sweflow env build -d data/demo --store store/
      sweflow env build -d tasks.jsonl --specs specs.yaml --repo-mirror mirrors/ -s store -i A,B
      sweflow env build -d data/demo --store store/ --executor ray:127.0.0.1:6379
    """
    if pack not in (None, "squashfs", "erofs"):
        raise CliError(f"--pack must be squashfs or erofs, not {pack!r}")
    if pack and executor_name not in (None, "local"):
        raise CliError("--pack packs this machine's store: not with --executor")
    dataset = data.load()
    rows = dataset.rows
    work_starts(f"build {len(rows)} instance(s) into {data.store}")
    executor = cli_executor(executor_name, data.store)
    results = data.build_with_progress(dataset, rows, executor)
    print_retries(executor)
    print_build_table(results)
    if pack:
        from sweflow.envcache.builder import EnvBuilder

        work = data.build_work(dataset)
        with console.status(f"packing layers as {pack}"):
            done = [r.instance_id for r in results if r.status != "error"]
            packed = EnvBuilder(work.specs, work.options).pack(done, pack)
            console.print(f"packed {packed} layer(s) as {pack}")
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
    executor_name: str | None = ExecutorOption,
) -> None:
    """Build what is missing, then check each instance's tests both ways in fresh sandboxes.

    Examples:
      sweflow env validate -d data/demo --store store/ --out valid.jsonl --report report/ --runs 2
      sweflow env validate -d data/demo --store store/ --out v.jsonl --report r/ --executor ray:auto
    """
    from sweflow.cluster.environments import ValidateWork, validate_instances
    from sweflow.envcache.validate import write_outputs

    dataset = data.load()
    rows = dataset.rows
    work_starts(f"build and validate {len(rows)} instance(s) in {data.store}")
    executor = cli_executor(executor_name, data.store)
    data.build_with_progress(dataset, rows, executor)
    work = ValidateWork(data.build_work(dataset), runs, timeout)
    with progress_bar() as bar:
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
        callback=non_negative,
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
def _layer_bar(description: str) -> Iterator[Progress]:
    """A progress bar over a store's layers, and the progress that moves it (the bar keeps
    ``description``, not each layer's name)."""
    with progress_bar() as bar:
        task = bar.add_task(description, total=None)
        yield lambda _layer, done=0, total=0: bar.update(task, completed=done, total=total)


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
        table.add_row(
            kind, str(row.layers), f"{row.files:,}", _mb(row.apparent_bytes), _mb(row.own_bytes)
        )
    table.add_row("shared by several", "", "", "", _mb(usage.shared_bytes))
    for kinds, nbytes in usage.shared_by_kinds.items():
        *most, last = kinds.split("+")
        who = f"{', '.join(most)} and {last}" if most else last
        table.add_row(f"  by {who} layers", "", "", "", _mb(nbytes))
    table.add_row(
        "[bold]on disk[/]",
        str(usage.layers),
        f"{usage.distinct_files:,}",
        _mb(usage.apparent_bytes),
        f"[bold]{_mb(usage.disk_bytes)}[/]",
    )
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
