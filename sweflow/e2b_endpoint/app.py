"""The E2B-compatible endpoint as one ASGI app: control API, envd's RPC services and file routes.

The e2b SDK reaches it with ``E2B_API_URL`` (control) and ``E2B_SANDBOX_URL`` (envd) both set to
its address; envd requests carry the sandbox in the ``E2b-Sandbox-Id`` header. Every request is
checked before it is routed (:mod:`.auth`): envd's need the sandbox's own access token, template
uploads their signed link, everything else the API key. Templates are built instances of a
layer store, templates built here with the SDK's template build (:mod:`.builds`), the bases the
endpoint was started with (``base``, the SDK's default template, is the first), and host
directories only when the endpoint allows them (never the host's / nor its view of it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process.process_connect import ProcessASGIApplication
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sweflow.e2b_endpoint.auth import same
from sweflow.e2b_endpoint.builds import UPLOAD_PATH, TemplateBuilds
from sweflow.e2b_endpoint.control import ControlRoutes
from sweflow.e2b_endpoint.filesystem import FileOps, FileRoutes, FilesystemService
from sweflow.e2b_endpoint.processes import ProcessService
from sweflow.e2b_endpoint.registry import Registry, UnknownSandbox, UnknownTemplate
from sweflow.envcache.store import LayerStore
from sweflow.sandbox.local.hostroot import is_host_root
from sweflow.sandbox.spec import SandboxSpec

REAP_INTERVAL_S = 1.0
ENVD_SERVICES = ("/process.Process/", "/filesystem.Filesystem/")
ENVD_ROUTES = ("/files", "/health")


def template_specs(
    store: LayerStore | None,
    base: Callable[[str], Path],
    default_base: str,
    layer_roots: Sequence[Path] = (),
    built: Callable[[str], SandboxSpec | None] = lambda _name: None,
    *,
    bases: Sequence[str] = (),
    host_dirs: bool = False,
):
    """Template name -> spec: a template ``built`` here; a built instance of ``store``;
    ``layers:DIR:DIR...`` (the e2b backend's form without a base template, for directories under
    ``layer_roots`` only: a client must not mount the host's other files); ``base`` (which is
    ``default_base``) or one of ``bases``, which ``base`` resolves; with ``host_dirs``, any
    other host directory but / and the host-root view."""
    roots = [root.resolve() for root in layer_roots]
    allowed = {default_base, *bases}

    def spec(template: str) -> SandboxSpec:
        if (made := built(template)) is not None:
            return made
        if store is not None and _is_instance_id(template) and store.read_manifest(template):
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
                _refuse_host_root(layer)
            return SandboxSpec(layers=layers, workdir="/")
        name = default_base if template == "base" else template
        if name in allowed:
            return SandboxSpec(layers=[base(name)], workdir="/root" if name != "host" else "/")
        if host_dirs and name.startswith("/") and Path(name).is_dir():
            layer = Path(name).resolve()
            _refuse_host_root(layer)
            return SandboxSpec(layers=[layer], workdir="/")
        where = f", an instance built in {store.root}" if store is not None else ""
        dirs = ", a host directory" if host_dirs else ""
        raise UnknownTemplate(
            f"template {template!r} is none of this endpoint's: base ({default_base}), "
            f"{', '.join(sorted(allowed - {default_base})) or 'no other base'}{where}{dirs}, "
            "or one built here (host directories need serve-e2b --allow-host-dirs, other bases "
            "--allow-base)"
        )

    return spec


def _is_instance_id(name: str) -> bool:
    return bool(name) and "/" not in name and not name.startswith(".")


def _refuse_host_root(layer: Path) -> None:
    """The host's / (or a mount of it: what the `host` base masks) is never a layer."""
    if is_host_root(layer):
        raise UnknownTemplate(f"{layer}: the host's root is not a template here")


def endpoint_app(registry: Registry, key: str, builds: TemplateBuilds | None = None) -> Callable:
    """The ASGI app: envd's Connect services by path prefix, the rest to Starlette; ``key`` is
    the API key every control and build request must carry."""
    processes = ProcessService(registry)
    file_ops = FileOps()
    files = FileRoutes(registry, file_ops)
    process_app = ProcessASGIApplication(processes)
    filesystem_app = FilesystemASGIApplication(FilesystemService(registry, file_ops))

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

    def refusal(scope) -> JSONResponse | None:
        """Why this request may not go on (401, or 502 for a sandbox that is gone), or None."""
        path = scope.get("path", "")
        headers = Headers(scope=scope)
        if path.startswith(UPLOAD_PATH):
            return None  # its signed link is checked by the route (the SDK sends no key there)
        if not (path.startswith(ENVD_SERVICES) or path in ENVD_ROUTES):
            if same(headers.get("x-api-key"), key):
                return None
            return _error(401, "a valid API key is required (X-API-KEY; serve-e2b printed it)")
        # as E2B's proxy in front of envd: a sandbox that is gone answers 502 "not found"
        try:
            live = registry.get(headers.get("e2b-sandbox-id", ""))
        except UnknownSandbox as exc:
            return _error(502, str(exc))
        if same(headers.get("x-access-token"), live.token):
            return None
        return _error(401, f"sandbox {live.id}: its envd access token is required")

    async def app(scope, receive, send) -> None:
        if scope["type"] == "http" and (reply := refusal(scope)) is not None:
            return await reply(scope, receive, send)
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/process.Process/"):
            await process_app(scope, receive, send)
        elif path.startswith("/filesystem.Filesystem/"):
            await filesystem_app(scope, receive, send)
        else:
            await web(scope, receive, send)

    return app


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)
