"""E2B's template build API over layer directories: what ``Template.build`` of the e2b SDK calls.

The SDK requests a build (``POST /v3/templates``), asks for an upload link per COPY step's files
(``GET /templates/{id}/files/{hash}``), uploads each tar there, starts the build with the steps
(``POST /v2/templates/{id}/builds/{build}``) and polls its status with logs. Here a template is a
layer stack: the ``fromTemplate`` template's layers, plus one layer per COPY (the uploaded files)
and per RUN (the command's writes, captured from a sandbox whose upper layer is on disk), with
ENV, WORKDIR and the build's cpuCount and memoryMB carried into the spec. Built templates are
JSON files under ``root/templates`` and open like any other template. ``fromImage`` needs a
registry, which this endpoint does not reach: such a build fails with a message that says so.
RUN steps have no network.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sweflow.errors import SweflowError
from sweflow.sandbox.spec import Limits, SandboxSpec

STEP_TIMEOUT_S = 3600.0
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")


class BuildFailed(SweflowError):
    """A build step failed; the message is the build's reason."""


@dataclass
class Build:
    template: str  # the name being built
    limits: Limits  # the cpuCount and memoryMB asked for
    status: str = "waiting"
    logs: list[dict] = field(default_factory=list)
    reason: str | None = None

    def log(self, message: str, level: str = "info") -> None:
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self.logs.append({"timestamp": now, "level": level, "message": message})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


class TemplateBuilds:
    """Builds templates into ``root`` over the templates ``specs`` already resolves."""

    def __init__(self, root: Path, specs: Callable[[str], SandboxSpec]) -> None:
        self.root = root
        self.specs = specs
        for sub in ("templates", "files", "layers"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._builds: dict[str, Build] = {}
        self._lock = threading.Lock()

    # -- built templates ----------------------------------------------------------------------
    def spec(self, name: str) -> SandboxSpec | None:
        """The spec of a template built here, or None."""
        if not _NAME.match(name):
            return None
        try:
            saved = (self.root / "templates" / f"{name}.json").read_text()
        except FileNotFoundError:
            return None
        return SandboxSpec.model_validate_json(saved)

    def _save(self, name: str, spec: SandboxSpec) -> None:
        path = self.root / "templates" / f"{name}.json"
        part = path.with_suffix(".part")
        part.write_text(spec.model_dump_json(include={"layers", "env", "workdir", "limits"}))
        part.rename(path)

    # -- routes -------------------------------------------------------------------------------
    def routes(self) -> list[Route]:
        return [
            Route("/v3/templates", self.request, methods=["POST"]),
            Route("/templates/aliases/{alias}", self.alias, methods=["GET"]),
            Route("/templates/{template_id}/files/{digest}", self.upload_link, methods=["GET"]),
            Route("/template-files/{digest}", self.receive_file, methods=["PUT"]),
            Route("/v2/templates/{template_id}/builds/{build_id}", self.start, methods=["POST"]),
            Route(
                "/templates/{template_id}/builds/{build_id}/status", self.status, methods=["GET"]
            ),
        ]

    async def request(self, request: Request) -> Response:
        body = await request.json()
        name = str(body.get("name") or "").partition(":")[0]
        if not _NAME.match(name):
            return _error(400, f"template name {name!r}: use lowercase letters, digits, . _ -")
        try:
            limits = Limits(
                cpus=body.get("cpuCount"),
                memory_bytes=body["memoryMB"] << 20 if body.get("memoryMB") else None,
            )
        except (ValueError, TypeError) as exc:
            return _error(400, f"cpuCount / memoryMB: {exc}")
        build_id = uuid.uuid4().hex
        with self._lock:
            self._builds[build_id] = Build(name, limits)
        reply = {"templateID": name, "buildID": build_id, "public": False, "names": [name],
                 "aliases": [name], "tags": []}  # fmt: skip
        return JSONResponse(reply, status_code=202)

    async def alias(self, request: Request) -> Response:
        name = request.path_params["alias"]
        if self.spec(name) is None:
            return _error(404, f"template {name!r} was not found")
        return JSONResponse({"templateID": name, "public": False})

    async def upload_link(self, request: Request) -> Response:
        digest = request.path_params["digest"]
        if not _HASH.match(digest):
            return _error(400, f"files hash {digest!r} is not a SHA-256 hex digest")
        present = (self.root / "files" / digest).exists()
        url = f"{request.base_url}template-files/{digest}"
        return JSONResponse({"present": present, "url": url}, status_code=201)

    async def receive_file(self, request: Request) -> Response:
        digest = request.path_params["digest"]
        if not _HASH.match(digest):
            return _error(400, f"files hash {digest!r} is not a SHA-256 hex digest")
        target = self.root / "files" / digest
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as part:
            async for chunk in request.stream():
                part.write(chunk)
        Path(part.name).rename(target)
        return Response(status_code=200)

    async def start(self, request: Request) -> Response:
        build = self._builds.get(request.path_params["build_id"])
        if build is None or build.status != "waiting":
            return _error(404, f"build {request.path_params['build_id']} was not requested")
        body = await request.json()
        build.status = "building"
        threading.Thread(target=self._build, args=(build, body), daemon=True).start()
        return Response(status_code=202)

    async def status(self, request: Request) -> Response:
        build_id = request.path_params["build_id"]
        build = self._builds.get(build_id)
        if build is None:
            return _error(404, f"build {build_id} was not found")
        offset = int(request.query_params.get("logsOffset") or 0)
        reply: dict = {"buildID": build_id, "templateID": build.template, "status": build.status,
                       "logEntries": build.logs[offset:offset + 100], "logs": []}  # fmt: skip
        if build.reason is not None:
            reply["reason"] = {"message": build.reason}
        return JSONResponse(reply)

    # -- building -----------------------------------------------------------------------------
    def _build(self, build: Build, body: dict) -> None:
        try:
            base = body.get("fromTemplate")
            if not base:
                raise BuildFailed(
                    f"fromImage {body.get('fromImage')!r}: this endpoint has no registry; "
                    "build from a template (Template().from_template(NAME))"
                )
            spec = self.specs(base)
            layers, env, workdir = list(spec.layers), dict(spec.env), spec.workdir
            for number, step in enumerate(body.get("steps") or [], start=1):
                kind, args = step.get("type"), step.get("args") or []
                build.log(f"[{number}] {kind} {' '.join(args)}")
                started = time.monotonic()
                layer = self.root / "layers" / f"{build.template}-{uuid.uuid4().hex[:12]}"
                if kind == "COPY":
                    self._copy(layer, args, step.get("filesHash", ""))
                    layers.append(layer)
                elif kind == "RUN":
                    current = SandboxSpec(layers=layers, env=env, workdir=workdir)
                    self._run(current, layer, args[0] if args else "", build)
                    layers.append(layer)
                elif kind == "ENV":
                    env.update(zip(args[::2], args[1::2], strict=True))
                elif kind == "WORKDIR" and args:
                    workdir = args[0]
                elif kind == "USER":
                    build.log("USER: commands here run as root", level="warn")
                else:
                    raise BuildFailed(f"step {number}: {kind} is not supported by this endpoint")
                build.log(f"[{number}] done in {time.monotonic() - started:.1f} s")
            limits = spec.limits.model_copy(update=build.limits.model_dump(exclude_none=True))
            built = SandboxSpec(layers=layers, env=env, workdir=workdir, limits=limits)
            self._save(build.template, built)
            build.log(f"template {build.template} is ready")
            build.status = "ready"
        except Exception as exc:  # noqa: BLE001 - every failure is the build's reason
            build.reason = str(exc)
            build.log(str(exc), level="error")
            build.status = "error"

    def _copy(self, layer: Path, args: list[str], digest: str) -> None:
        """Unpack the uploaded files of a COPY step at its destination, as a new layer."""
        if len(args) < 2:
            raise BuildFailed(f"COPY needs a source and a destination, got {args}")
        upload = self.root / "files" / digest
        if not _HASH.match(digest) or not upload.exists():
            raise BuildFailed(f"COPY {args[0]}: its files ({digest or 'no hash'}) are not uploaded")
        with tempfile.TemporaryDirectory(dir=self.root / "layers") as staging:
            with tarfile.open(upload) as tar:
                tar.extractall(staging, filter="data")
            dest = layer / args[1].lstrip("/")
            for entry in Path(staging).iterdir():
                if entry.is_dir():  # a directory's content goes into the destination
                    shutil.copytree(entry, dest, symlinks=True, dirs_exist_ok=True)
                else:
                    target = dest / entry.name if args[1].endswith("/") else dest
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(entry, target)
        layer.mkdir(parents=True, exist_ok=True)

    def _run(self, spec: SandboxSpec, layer: Path, command: str, build: Build) -> None:
        """Run a RUN step's command over ``spec``; its writes become ``layer``."""
        from sweflow.sandbox.local import LocalSandbox

        layer.mkdir(parents=True)
        disk = spec.model_copy(
            update={"upper": "disk", "upper_dir": layer, "limits": Limits(output_bytes=1 << 20)}
        )
        with LocalSandbox(disk) as sandbox:
            result = sandbox.exec(command, timeout=STEP_TIMEOUT_S)
        lines = result.output.splitlines()
        for line in lines[-50:]:
            build.log(line)
        if not result.ok:
            tail = "\n".join(lines[-10:])
            raise BuildFailed(f"RUN {command[:120]!r} exited {result.exit_code}:\n{tail}")
