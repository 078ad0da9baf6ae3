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
    positive,
    spec_from_options,
    work_starts,
)
from sweflow.sandbox.backends import BACKENDS, check_backend_name

sandbox_app = App(help="Open, use and clean up sandboxes.")


@sandbox_app.command("run")
def sandbox_run(
    command: str = typer.Argument(..., help="Shell command to run inside."),
    base: str = BaseOption,
    layer: list[Path] = LayerOption,
    workdir: str = WorkdirOption,
    backend: str = BackendOption,
    timeout: float = typer.Option(
        600.0, help="Seconds before the command is killed.", callback=positive
    ),
    network: bool = typer.Option(False, help="Share the host's network."),
) -> None:
    """Run one command in a fresh sandbox and exit with its status.

    Examples:
      sweflow sandbox run 'python3 -V'
      sweflow sandbox run --base docker:python:3.11-slim --layer ./site 'ls /'
    """
    from sweflow.sandbox import open_sandbox

    work_starts(f"run {command!r} in a {backend} sandbox on {base}")
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

    work_starts(f"open a shell in a {backend} sandbox on {base}")
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

    names = [check_backend_name(name) for name in backend] or list(BACKENDS)
    work_starts(f"collect the garbage of {', '.join(names)}")
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


@sandbox_app.command("serve-e2b")
def sandbox_serve_e2b(
    port: int = typer.Option(49982, min=1, max=65535, help="Loopback port to listen on."),
    store: Path | None = typer.Option(
        None, help="Layer store whose built instances are templates (by instance id)."
    ),
    base: str = typer.Option(
        "debian:bookworm", help="What the SDK's default template `base` opens (a --base value)."
    ),
    allow_base: list[str] = typer.Option(
        [],
        "--allow-base",
        help="Another base clients may name as a template (repeat the option): debian:SUITE, "
        "docker:IMAGE, a directory, or host (the host's own files: see Security).",
    ),
    allow_host_dirs: bool = typer.Option(
        False,
        "--allow-host-dirs",
        help="Let clients name any host directory as a template (never / nor the host-root "
        "view); without it, a template is never a path the client picks.",
    ),
    layers_from: list[Path] = typer.Option(
        [],
        "--layers-from",
        help="Allow `layers:DIR:...` templates of directories under this (--store's layers and "
        "the base rootfs cache are allowed).",
    ),
    templates: Path | None = typer.Option(
        None, help="Where templates built with the SDK's Template.build are kept."
    ),
    key_file: Path | None = typer.Option(
        None,
        "--key-file",
        help="Also write the API key to this file, readable by its owner only (0600).",
        dir_okay=False,
    ),
    max_upload_mb: int = typer.Option(
        8192,
        min=1,
        help="Largest template upload (a COPY step's files), and what one may unpack to, in MiB.",
    ),
) -> None:
    """Serve E2B's control API and envd over local sandboxes, for the e2b SDK on this machine.

    Point the SDK at it with E2B_API_URL and E2B_SANDBOX_URL (both this address) and
    E2B_API_KEY (the key below). A template is an instance id of --store, the base (`base`,
    the --base value) or an --allow-base one, or one built here with the SDK's Template.build
    (from a template; kept in --templates, default ~/.cache/sweflow/e2b-templates). Ctrl-C
    closes every sandbox.

    Security: every request needs the API key (X-API-KEY, as the SDK sends E2B_API_KEY): it is
    $SWEFLOW_E2B_API_KEY if set (16 characters at least; an option would show it in ps), else a
    new random one printed at start (and written to --key-file). Whoever holds it may use every
    sandbox of the endpoint; a sandbox's envd (commands, files) takes only that sandbox's access
    token, which its create reply carries. Clients name no host paths: --allow-host-dirs lets
    them name any host directory, and --allow-base host the host's own root (masked, but
    commands there run as root over the host's files; the file routes serve only files every
    user may read). It listens on loopback only.

    Example:
      sweflow sandbox serve-e2b --store ~/.cache/sweflow/store --port 49982
      sweflow sandbox serve-e2b --key-file ~/.e2b-key --allow-base debian:trixie
    """
    import uvicorn

    from sweflow.cli.common import base_layer
    from sweflow.e2b_endpoint.app import endpoint_app, template_specs
    from sweflow.e2b_endpoint.auth import KEY_ENV, key_from_env, new_secret, write_key_file
    from sweflow.e2b_endpoint.builds import TemplateBuilds
    from sweflow.e2b_endpoint.registry import Registry
    from sweflow.envcache.store import LayerStore
    from sweflow.paths import cache_root, rootfs_cache

    if store is not None and not (store / "manifests").is_dir():
        raise typer.BadParameter(
            f"{store} is not a layer store (no manifests/ in it)", param_hint="--store"
        )
    if key_file is not None and not key_file.expanduser().parent.is_dir():
        raise typer.BadParameter(f"{key_file.parent} is not a directory", param_hint="--key-file")
    for name in allow_base:
        if (
            name != "host"
            and not name.startswith(("debian:", "docker:"))
            and not Path(name).is_dir()
        ):
            raise typer.BadParameter(
                f"{name!r}: a base is debian:SUITE, docker:IMAGE, host or a directory",
                param_hint="--allow-base",
            )
    given = key_from_env()
    work_starts(f"serve an E2B endpoint on port {port}")
    key = given or new_secret()
    if key_file is not None:
        write_key_file(key_file.expanduser(), key)
    layer_store = LayerStore(store) if store is not None else None
    for name in (base, *allow_base):
        base_layer(name)  # built now if needed, not on the first create
    builds = TemplateBuilds(
        templates or cache_root() / "e2b-templates",
        lambda name: specs(name),
        key,
        max_upload_mb << 20,
    )
    roots = [*layers_from, *([store, rootfs_cache()] if store is not None else [])]
    specs = template_specs(
        layer_store,
        base_layer,
        base,
        roots,
        built=builds.spec,
        bases=allow_base,
        host_dirs=allow_host_dirs,
    )
    registry = Registry(specs)
    url = f"http://127.0.0.1:{port}"
    shown = f"${KEY_ENV}" if given else key
    console.print(
        f"E2B endpoint on {url}\n  export E2B_API_URL={url} E2B_SANDBOX_URL={url} "
        f"E2B_API_KEY={shown}",
        highlight=False,
        soft_wrap=True,
    )
    # open command streams must not hold Ctrl-C up: after half a second they are cut, and the
    # app's shutdown closes every sandbox
    uvicorn.run(
        endpoint_app(registry, key, builds),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=0.5,
    )
