"""What every ``sweflow`` sub-command shares: error handling, console, common options."""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints

import typer
from rich.console import Console
from rich.markup import escape

from sweflow.cluster.executors import EXECUTORS, check_executor_name
from sweflow.errors import ConfigError, SweflowError
from sweflow.paths import name_problem, output_folder_problem
from sweflow.sandbox.backends import DEFAULT_BACKEND, backends_help, check_backend_name

if TYPE_CHECKING:
    import rich.progress

    from sweflow.sandbox.spec import SandboxSpec

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

console = Console()
EXIT_USER_ERROR = 2


def handle_errors(func: F) -> F:
    """Print a SweflowError as one red ``error: <message>`` line on stderr and exit 2.

    An interrupt that says where the work stopped (a trainer's resume point) is printed as one
    ``interrupted: <message>`` line before it goes on (exit 130). Other exceptions are bugs and
    keep their traceback. Every command and callback registered on an ``App`` gets this
    automatically; use it directly only on a plain ``typer.Typer``.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SweflowError as e:
            # Made at call time so that a redirected or captured stderr is honoured.
            Console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt as e:
            if str(e):
                Console(stderr=True).print(
                    f"[yellow]interrupted:[/] {escape(str(e))}", highlight=False
                )
            raise

    return wrapper  # type: ignore[return-value]


_dry_run = threading.Event()  # set by `sweflow --dry-run` for the command it runs


def dry_run(ctx: typer.Context) -> None:
    """Make the command ``ctx`` runs stop where its work starts (until ``ctx`` closes)."""
    _dry_run.set()
    ctx.call_on_close(_dry_run.clear)


def dry_running() -> bool:
    """Whether the command runs under ``sweflow --dry-run`` (it may show more of its plan)."""
    return _dry_run.is_set()


def work_starts(what: str) -> None:
    """Where a command's checks end and its work begins. Under ``sweflow --dry-run`` the command
    stops here, its options and inputs checked, saying what it would do (exit 0): a user tries a
    command line before a long run, and tests/cli/test_cli_examples.py runs every help example
    so."""
    if _dry_run.is_set():
        console.print(f"dry run: checked; would {what}", highlight=False)
        raise typer.Exit(0)


class App(typer.Typer):
    """A typer app whose commands and callbacks all go through :func:`handle_errors`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("no_args_is_help", True)
        kwargs.setdefault("pretty_exceptions_show_locals", False)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(*args, **kwargs)

        def decorator(func: F) -> F:
            register(handle_errors(func))
            return func

        return decorator

    def callback(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().callback(*args, **kwargs)

        def decorator(func: F) -> F:
            register(handle_errors(func))
            return func

        return decorator


def option_group(group: type) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator that gives a command the options of the dataclass ``group``.

    Each field of ``group`` carries its ``typer.Option`` as ``metadata["option"]``. The command's
    parameter annotated ``group`` becomes those options in ``--help`` (in its place) and gets them
    as one ``group`` instance. A parameter of the command named like one of them replaces that
    option (to say it differently) and gets the value as well.
    """
    hints = get_type_hints(group)
    group_options = {f.name: f.metadata["option"] for f in fields(group)}

    def decorator(command: Callable[..., R]) -> Callable[..., R]:
        signature = inspect.signature(command, eval_str=True)
        own = signature.parameters
        group_name = next(name for name, p in own.items() if p.annotation is group)
        keyword = inspect.Parameter.KEYWORD_ONLY
        options = [
            inspect.Parameter(name, keyword, default=option, annotation=hints[name])
            for name, option in group_options.items()
            if name not in own
        ]
        parameters: list[inspect.Parameter] = []
        for name, p in own.items():
            parameters += options if name == group_name else [p.replace(kind=keyword)]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> R:
            value = group(**{name: kwargs[name] for name in group_options})
            return command(**{k: v for k, v in kwargs.items() if k in own}, **{group_name: value})

        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return wrapper

    return decorator


def base_layer(base: str) -> Path:
    """Resolve a ``--base`` value, showing debootstrap's or docker's progress while it builds."""
    from sweflow.paths import rootfs_cache
    from sweflow.sandbox.rootfs import resolve_base

    with console.status(f"preparing base layer {base}") as status:
        return resolve_base(
            base, rootfs_cache(), progress=lambda line, *_: status.update(line[-100:])
        )


BaseOption = typer.Option(
    "debian:bookworm",
    "--base",
    help="Base layer: debian:bullseye|bookworm|trixie, host, docker:IMAGE, or a directory.",
)
LayerOption = typer.Option(
    [], "--layer", "-l", help="Extra read-only layer directory (lowest first)."
)
WorkdirOption = typer.Option("/", "--workdir", "-w", help="Working directory inside.")
WheelhouseOption = typer.Option(
    None,
    "--wheelhouse",
    help="Install offline from this wheel folder.",
    exists=True,  # checked before any work: a missing one failed every build in its sandbox
    file_okay=False,
)


def _known_backend(value: str) -> str:
    """--backend's check before any work: a registered name or a dotted class path."""
    try:
        return check_backend_name(value)
    except SweflowError as exc:
        raise typer.BadParameter(str(exc)) from None


def positive(value: float | None) -> float | None:
    """An option's check before any work: counts, workers and seconds must be finite and above
    zero (a timeout of 0 never means "no limit" here; nan timed out "after nan s", inf
    overflowed)."""
    if value is not None and _finite(value) <= 0:
        raise typer.BadParameter(f"must be greater than 0, got {value}")
    return value


def non_negative(value: float | None) -> float | None:
    """An option's check before any work: a finite number, 0 or more (a temperature, a grace)."""
    if value is not None and _finite(value) < 0:
        raise typer.BadParameter(f"must be 0 or more, got {value}")
    return value


def port_number(value: int | None) -> int | None:
    """A TCP port option: 1 to 65535."""
    if value is not None and not 0 < value < 65536:
        raise typer.BadParameter(f"must be a port number from 1 to 65535, got {value}")
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


def path_name(value: str | None) -> str | None:
    """A name option that becomes a folder or file name (a run id): one path component."""
    if value is not None and (problem := name_problem(value)) is not None:
        raise typer.BadParameter(problem)
    return value


def model_ref(value: str | None) -> str | None:
    """A model option: a folder, a bundled name or a Hub id, checked without fetching it."""
    from sweflow.serving.models import model_ref_problem

    if value is not None and (problem := model_ref_problem(value)) is not None:
        raise typer.BadParameter(problem)
    return value


def image_source(value: str | None) -> str | None:
    """``--images``: a folder of image archives or registry:HOST[:PORT]."""
    if value is not None and not value.startswith("registry:") and not Path(value).is_dir():
        raise typer.BadParameter(f"{value} is neither a folder of image archives nor registry:HOST")
    return value


def folder_or_new(value: Path | None) -> Path | None:
    """A folder option that sweflow writes into (a store, a report folder): refused when the
    path is a file, a folder of the system or not writable (``paths.output_folder_problem``)."""
    if value is not None and (problem := output_folder_problem(value)) is not None:
        raise typer.BadParameter(problem)
    return value


BackendOption = typer.Option(
    DEFAULT_BACKEND,
    "--backend",
    "-b",
    help=f"Sandbox backend: {backends_help()}.",
    callback=_known_backend,
)


def spec_from_options(base: str, layers: list[Path], workdir: str, network: bool) -> SandboxSpec:
    from sweflow.sandbox.spec import SandboxSpec

    return SandboxSpec(layers=[base_layer(base), *layers], workdir=workdir, network=network)


def executor_parts(value: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:ADDRESS`` for a registered name (``ray:HEAD:6379``); a dotted path
    (``mypackage.mod:MyExecutor``) is a name whole."""
    head, sep, address = value.partition(":")
    return (head, address) if sep and head in EXECUTORS else (value, None)


def _executor(value: str | None) -> str | None:
    """``--executor`` is checked before any work: a registered name or a dotted path, and for
    ``ray`` the ray extra installed."""
    if value is None:
        return None
    import importlib.util

    name, _ = executor_parts(value)
    try:
        check_executor_name(name)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    if name == "ray" and importlib.util.find_spec("ray") is None:
        raise typer.BadParameter("Ray is not installed: pip install 'sweflow[ray]'")
    return value


ExecutorOption = typer.Option(
    None,
    "--executor",
    metavar="NAME",
    help="Where the per-instance work runs: local (this process's threads, the default), ray "
    "(a Ray started for this command), ray:HOST:PORT (a Ray cluster's head), ray:auto (the "
    "cluster running on this machine), or a dotted path module:Class to an Executor.",
    callback=_executor,
)


def cli_executor(executor: str | None, store: Path):
    """The executor ``--executor`` names (this process's threads without it); one that waits
    says so on the console."""
    from sweflow.cluster.executors import make_executor

    name, address = executor_parts(executor or "local")
    options: dict[str, Any] = {} if address is None else {"address": address}
    return make_executor(name, store, notify=console.print, **options)


def progress_bar() -> rich.progress.Progress:
    """The commands' one progress bar: what runs, a bar, done of total, time elapsed."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
