"""The E2B-compatible endpoint as one ASGI app: control API, envd's RPC services and file routes.

The e2b SDK reaches it with ``E2B_API_URL`` (control) and ``E2B_SANDBOX_URL`` (envd) both set to
its address; envd requests carry the sandbox in the ``E2b-Sandbox-Id`` header. Templates are
built instances of a layer store, bases, or templates built here with the SDK's template build
(:mod:`.builds`); ``base`` (the SDK's default template) is the endpoint's default base.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process.process_connect import ProcessASGIApplication
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sweflow.e2b_endpoint.builds import TemplateBuilds
from sweflow.e2b_endpoint.control import ControlRoutes
from sweflow.e2b_endpoint.filesystem import FileRoutes, FilesystemService
from sweflow.e2b_endpoint.processes import ProcessService
from sweflow.e2b_endpoint.registry import Registry, UnknownSandbox, UnknownTemplate
from sweflow.envcache.store import LayerStore
from sweflow.sandbox.spec import SandboxSpec

REAP_INTERVAL_S = 1.0
ENVD_PATHS = ("/process.Process/", "/filesystem.Filesystem/", "/files", "/health")


def template_specs(
    store: LayerStore | None,
    base: Callable[[str], Path],
    default_base: str,
    layer_roots: Sequence[Path] = (),
    built: Callable[[str], SandboxSpec | None] = lambda _name: None,
):
    """Template name -> spec: a template ``built`` here; a built instance of ``store``;
    ``layers:DIR:DIR...`` (the e2b backend's form without a base template, for directories under
    ``layer_roots`` only: a client must not mount the host's other files); else a base (``base``
    resolves it; ``base`` is ``default_base``)."""
    roots = [root.resolve() for root in layer_roots]

    def spec(template: str) -> SandboxSpec:
        if (made := built(template)) is not None:
            return made
        if store is not None and store.read_manifest(template) is not None:
            from sweflow.envcache.builder import instance_sandbox_spec

            return instance_sandbox_spec(store, template)
        if template.startswith("layers:"):
            layers = [Path(part).resolve() for part in template.removeprefix("layers:").split(":")]
            for layer in layers:
                if not layer.is_dir() or not any(layer.is_relative_to(r) for r in roots):
                    raise UnknownTemplate(
                        f"template layer {layer} is not a directory under the endpoint's "
                        f"--layers-from ({', '.join(map(str, roots)) or 'none given'})"
                    )
            return SandboxSpec(layers=layers, workdir="/")
        name = default_base if template == "base" else template
        if name == "host" or name.startswith(("debian:", "docker:")) or Path(name).is_dir():
            return SandboxSpec(layers=[base(name)], workdir="/root" if name != "host" else "/")
        where = f" nor an instance built in {store.root}" if store is not None else ""
        raise UnknownTemplate(
            f"template {template!r} is neither a base (debian:SUITE, host, docker:IMAGE, "
            f"a directory){where}"
        )

    return spec


def endpoint_app(registry: Registry, builds: TemplateBuilds | None = None) -> Callable:
    """The ASGI app: envd's Connect services by path prefix, the rest to Starlette."""
    processes = ProcessService(registry)
    files = FileRoutes(registry)
    process_app = ProcessASGIApplication(processes)
    filesystem_app = FilesystemASGIApplication(FilesystemService(registry))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async def reap() -> None:
            while True:
                await asyncio.sleep(REAP_INTERVAL_S)
                for sandbox_id in await asyncio.to_thread(registry.reap):
                    processes.forget(sandbox_id)

        reaper = asyncio.create_task(reap())
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.to_thread(registry.close_all)
            await processes.close()

    async def health(_request) -> Response:
        return Response(status_code=204)

    control = ControlRoutes(registry, on_kill=processes.forget)
    web = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/files", files.download, methods=["GET"]),
            Route("/files", files.upload, methods=["POST"]),
            *control.routes(),
            *(builds.routes() if builds is not None else []),
        ],
        lifespan=lifespan,
    )

    async def app(scope, receive, send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith(ENVD_PATHS):
            # as E2B's proxy in front of envd: a sandbox that is gone answers 502 "not found"
            sandbox_id = dict(scope["headers"]).get(b"e2b-sandbox-id", b"").decode()
            try:
                registry.get(sandbox_id)
            except UnknownSandbox as exc:
                reply = JSONResponse({"code": 502, "message": str(exc)}, status_code=502)
                return await reply(scope, receive, send)
        if path.startswith("/process.Process/"):
            await process_app(scope, receive, send)
        elif path.startswith("/filesystem.Filesystem/"):
            await filesystem_app(scope, receive, send)
        else:
            await web(scope, receive, send)

    return app
