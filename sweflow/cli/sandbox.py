"""``sweflow sandbox``: run, shell into and clean up sandboxes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweflow.cli.common import (
    App,
    BackendOption,
    BaseOption,
    LayerOption,
    WorkdirOption,
    console,
    spec_from_options,
)
from sweflow.sandbox.backends import BACKENDS

sandbox_app = App(help="Open, use and clean up sandboxes.")


@sandbox_app.command("run")
def sandbox_run(
    command: str = typer.Argument(..., help="Shell command to run inside."),
    base: str = BaseOption,
    layer: list[Path] = LayerOption,
    workdir: str = WorkdirOption,
    backend: str = BackendOption,
    timeout: float = typer.Option(600.0, help="Seconds before the command is killed."),
    network: bool = typer.Option(False, help="Share the host's network."),
) -> None:
    """Run one command in a fresh sandbox and exit with its status.

    Examples:
      sweflow sandbox run 'python3 -V'
      sweflow sandbox run --base docker:python:3.11-slim --layer ./site 'ls /'
    """
    from sweflow.sandbox import open_sandbox

    spec = spec_from_options(base, layer, workdir, network)
    with open_sandbox(spec, backend) as sandbox:
        result = sandbox.exec(command, timeout=timeout)
    sys.stdout.write(result.output)
    if result.timed_out:
        Console(stderr=True).print(f"[yellow]timed out after {timeout} s[/]")
    raise typer.Exit(result.exit_code)


@sandbox_app.command("shell")
def sandbox_shell(
    base: str = BaseOption,
    layer: list[Path] = LayerOption,
    workdir: str = WorkdirOption,
    backend: str = BackendOption,
    network: bool = typer.Option(False, help="Share the host's network."),
) -> None:
    """Open an interactive shell in a fresh sandbox; everything is removed when it exits.

    Example:
      sweflow sandbox shell --base debian:bookworm --workdir /tmp
    """
    from sweflow.sandbox import open_sandbox

    spec = spec_from_options(base, layer, workdir, network)
    with open_sandbox(spec, backend) as sandbox:
        code = sandbox.terminal()
    raise typer.Exit(code)


@sandbox_app.command("gc")
def sandbox_gc(
    backend: list[str] = typer.Option(
        [], "--backend", "-b", help="Only these backends (repeat the option); default: all."
    ),
) -> None:
    """Remove what crashed sandboxes left behind: directories, cgroups, mounts, containers.

    Every registered backend is asked; one whose service does not answer (no docker daemon) is
    reported as skipped, unless it was named with --backend.

    Example:
      sweflow sandbox gc -b local
    """
    from sweflow.sandbox import SandboxStartError, backend_class

    names = backend or list(BACKENDS)
    table = Table(title="sandbox gc")
    for column in ("backend", "what", "count"):
        table.add_column(column, justify="right" if column == "count" else "left")
    skipped = []
    for name in names:
        try:
            counts = backend_class(name).collect_garbage()
        except SandboxStartError as exc:
            if backend:
                raise
            table.add_row(name, "skipped: not reachable", "")
            skipped.append(f"{name}: {exc}")
            continue
        for what, count in counts.items():
            table.add_row(name, what, str(count))
    console.print(table)
    for line in skipped:
        console.print(f"[dim]{escape(line)}[/]")
