"""The subset of E2B's control API the SDK uses: create, connect, list, info, timeout, kill.

Bodies and field names follow the e2b SDK's OpenAPI models (``templateID``, ``sandboxID``,
``envdVersion``...); errors are ``{"code", "message"}`` with the status the SDK maps to its
exceptions (404 NotFound, 400 InvalidArgument). A body is validated (:mod:`.bodies`) before any
sandbox opens; the create and connect replies carry the sandbox's ``envdAccessToken``, which its
envd routes require.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sweflow.e2b_endpoint.bodies import BadRequest, ConnectBody, CreateBody, TimeoutBody, parse
from sweflow.e2b_endpoint.registry import Live, Registry, UnknownSandbox, UnknownTemplate
from sweflow.errors import SweflowError

ENVD_VERSION = "0.5.7"  # what the served envd subset matches: default user, stdin, octet uploads
CLIENT_ID = "sweflow"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def _sandbox(live: Live, *, token: bool = False) -> dict:
    reply = {
        "templateID": live.template,
        "sandboxID": live.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "domain": None,
    }
    if token:  # what the SDK sends back as X-Access-Token to this sandbox's envd
        reply["envdAccessToken"] = live.token
    return reply


def _detail(live: Live) -> dict:
    limits = live.sandbox.spec.limits
    return {
        **_sandbox(live),
        "alias": live.template,
        "startedAt": live.iso(live.started_at),
        "endAt": live.iso(live.end_at),
        "cpuCount": int(limits.cpus or os.cpu_count() or 1),
        "memoryMB": (limits.memory_bytes or 0) >> 20,
        "diskSizeMB": limits.upper_bytes >> 20,
        "metadata": live.metadata,
        "state": "running",
    }


class ControlRoutes:
    """The control API's routes over ``registry``; ``on_kill(id)`` after a kill."""

    def __init__(self, registry: Registry, on_kill: Callable[[str], None]) -> None:
        self.registry = registry
        self.on_kill = on_kill

    def routes(self) -> list[Route]:
        return [
            Route("/v2/sandboxes", self.create, methods=["POST"]),
            Route("/sandboxes", self.create, methods=["POST"]),
            Route("/v2/sandboxes", self.list, methods=["GET"]),
            Route("/sandboxes", self.list, methods=["GET"]),
            Route("/sandboxes/{sandbox_id}", self.info, methods=["GET"]),
            Route("/sandboxes/{sandbox_id}", self.kill, methods=["DELETE"]),
            Route("/sandboxes/{sandbox_id}/timeout", self.set_timeout, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}/connect", self.connect, methods=["POST"]),
            Route("/v2/sandboxes/{sandbox_id}/connect", self.connect, methods=["POST"]),
        ]

    async def create(self, request: Request) -> Response:
        try:
            body = await parse(request, CreateBody)
            live = await asyncio.to_thread(
                self.registry.create,
                body.template,
                timeout=body.timeout,
                metadata=body.metadata or {},
                env=body.env_vars or {},
                network=body.network,
            )
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        except UnknownTemplate as exc:
            return _error(404, str(exc))
        except SweflowError as exc:
            return _error(400, str(exc))
        return JSONResponse(_sandbox(live, token=True), status_code=201)

    async def list(self, request: Request) -> Response:
        wanted = dict(
            pair.split("=", 1)
            for pair in request.query_params.get("metadata", "").split("&")
            if "=" in pair
        )
        lives = [
            live
            for live in self.registry.listed()
            if all(live.metadata.get(k) == v for k, v in wanted.items())
        ]
        return JSONResponse([_detail(live) for live in lives])

    async def info(self, request: Request) -> Response:
        try:
            return JSONResponse(_detail(self.registry.get(request.path_params["sandbox_id"])))
        except UnknownSandbox as exc:
            return _error(404, str(exc))

    async def kill(self, request: Request) -> Response:
        try:
            await asyncio.to_thread(self.registry.kill, request.path_params["sandbox_id"])
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        self.on_kill(request.path_params["sandbox_id"])
        return Response(status_code=204)

    async def set_timeout(self, request: Request) -> Response:
        try:
            body = await parse(request, TimeoutBody)
            self.registry.set_timeout(request.path_params["sandbox_id"], body.timeout)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        return Response(status_code=204)

    async def connect(self, request: Request) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        try:
            body = await parse(request, ConnectBody)
            live = self.registry.set_timeout(sandbox_id, body.timeout, extend_only=True)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        return JSONResponse(_sandbox(live, token=True), status_code=200)
