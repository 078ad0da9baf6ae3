"""E2B's template build API over layer directories: what ``Template.build`` of the e2b SDK calls.

The SDK requests a build (``POST /v3/templates``), asks for an upload link per COPY step's files
(``GET /templates/{id}/files/{hash}``), uploads each tar there, starts the build with the steps
(``POST /v2/templates/{id}/builds/{build}``) and polls its status with logs. Here a template is a
layer stack: the ``fromTemplate`` template's layers, plus one layer per COPY (the uploaded files)
and per RUN (the command's writes, captured from a sandbox whose upper layer is on disk), with
ENV, WORKDIR and the build's cpuCount and memoryMB carried into the spec. Built templates are
JSON files under ``root/templates`` and open like any other template. ``fromImage`` needs a
registry, which this endpoint does not reach: such a build fails with a message that says so.
RUN steps have no network. A build starts only from a template the endpoint serves.

Uploads: the link handed out carries an HMAC of the files' hash under the API key (the SDK's
PUT sends no key), an upload is capped at ``max_upload_bytes``, and a COPY checks it against
that hash before it unpacks it (:mod:`.copystep`).
"""

from __future__ import annotations

import os
import posixpath
import re
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

from sweflow.e2b_endpoint.auth import same, upload_token
from sweflow.e2b_endpoint.bodies import BadRequest, BuildRequestBody, BuildStartBody, parse
from sweflow.e2b_endpoint.copystep import CopyFailed, copy_into, files_hash
from sweflow.errors import SweflowError
from sweflow.sandbox.spec import Limits, SandboxSpec

STEP_TIMEOUT_S = 3600.0
UPLOAD_PATH = "/template-files/"
MAX_UPLOAD_BYTES = 8 << 30
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

    def __init__(
        self,
        root: Path,
        specs: Callable[[str], SandboxSpec],
        key: str,
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
    ) -> None:
        self.root = root
        self.specs = specs
        self.key = key
        self.max_upload_bytes = max_upload_bytes
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
            Route(UPLOAD_PATH + "{digest}", self.receive_file, methods=["PUT"]),
            Route("/v2/templates/{template_id}/builds/{build_id}", self.start, methods=["POST"]),
            Route(
                "/templates/{template_id}/builds/{build_id}/status", self.status, methods=["GET"]
            ),
        ]

    async def request(self, request: Request) -> Response:
        try:
            body = await parse(request, BuildRequestBody)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        name = body.name.partition(":")[0]
        if not _NAME.match(name):
            return _error(400, f"template name {name!r}: use lowercase letters, digits, . _ -")
        memory = body.memory_mb << 20 if body.memory_mb else None
        limits = Limits(cpus=body.cpu_count, memory_bytes=memory)
        build_id = uuid.uuid4().hex
        with self._lock:
            self._builds[build_id] = Build(name, limits)
        reply = {
            "templateID": name,
            "buildID": build_id,
            "public": False,
            "names": [name],
            "aliases": [name],
            "tags": [],
        }
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
        token = upload_token(self.key, digest)
        url = f"{request.base_url}{UPLOAD_PATH.lstrip('/')}{digest}?token={token}"
        return JSONResponse({"present": present, "url": url}, status_code=201)

    async def receive_file(self, request: Request) -> Response:
        """The PUT of a COPY's tar to the link :meth:`upload_link` gave: kept under its hash
        (checked against its content when a COPY uses it), at most ``max_upload_bytes``."""
        digest = request.path_params["digest"]
        if not _HASH.match(digest):
            return _error(400, f"files hash {digest!r} is not a SHA-256 hex digest")
        if not same(request.query_params.get("token"), upload_token(self.key, digest)):
            return _error(401, "this upload link is not one the endpoint gave out")
        limit = self.max_upload_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return _error(413, f"upload of {declared} bytes is over the {limit} allowed")
        target = self.root / "files" / digest
        fd, part = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                size = 0
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        return _error(413, f"upload is over the {limit} bytes allowed")
                    out.write(chunk)
            os.rename(part, target)
        finally:
            Path(part).unlink(missing_ok=True)
        return Response(status_code=200)

    async def start(self, request: Request) -> Response:
        build = self._builds.get(request.path_params["build_id"])
        if build is None or build.status != "waiting":
            return _error(404, f"build {request.path_params['build_id']} was not requested")
        try:
            body = await parse(request, BuildStartBody)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        build.status = "building"
        threading.Thread(target=self._build, args=(build, body), daemon=True).start()
        return Response(status_code=202)

    async def status(self, request: Request) -> Response:
        build_id = request.path_params["build_id"]
        build = self._builds.get(build_id)
        if build is None:
            return _error(404, f"build {build_id} was not found")
        offset = request.query_params.get("logsOffset") or "0"
        if not offset.isdigit():
            return _error(400, f"logsOffset must be a count of log entries, got {offset!r}")
        start = int(offset)
        reply: dict = {
            "buildID": build_id,
            "templateID": build.template,
            "status": build.status,
            "logEntries": build.logs[start : start + 100],
            "logs": [],
        }
        if build.reason is not None:
            reply["reason"] = {"message": build.reason}
        return JSONResponse(reply)

    # -- building -----------------------------------------------------------------------------
    def _build(self, build: Build, body: BuildStartBody) -> None:
        try:
            if not body.from_template:
                raise BuildFailed(
                    f"fromImage {body.from_image!r}: this endpoint has no registry; "
                    "build from a template (Template().from_template(NAME))"
                )
            spec = self.specs(body.from_template)
            layers, env, workdir = list(spec.layers), dict(spec.env), spec.workdir
            for number, step in enumerate(body.steps or [], start=1):
                kind, args = step.type, step.args
                build.log(f"[{number}] {kind} {' '.join(args)}")
                started = time.monotonic()
                layer = self.root / "layers" / f"{build.template}-{uuid.uuid4().hex[:12]}"
                if kind == "COPY":
                    self._copy(layer, args, step.files_hash or "")
                    layers.append(layer)
                elif kind == "RUN":
                    current = SandboxSpec(layers=layers, env=env, workdir=workdir)
                    self._run(current, layer, args[0] if args else "", build)
                    layers.append(layer)
                elif kind == "ENV":
                    env.update(zip(args[::2], args[1::2], strict=True))
                elif kind == "WORKDIR" and args:
                    workdir = posixpath.normpath(posixpath.join(workdir, args[0]))
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
        """Unpack the uploaded files of a COPY step at its destination, as a new layer, once
        they are checked to be what their hash says (else they are deleted)."""
        if len(args) < 2:
            raise BuildFailed(f"COPY needs a source and a destination, got {args}")
        upload = self.root / "files" / digest
        if not _HASH.match(digest) or not upload.exists():
            raise BuildFailed(f"COPY {args[0]}: its files ({digest or 'no hash'}) are not uploaded")
        with open(upload, "rb") as files:  # one open file, checked then unpacked
            try:
                found = files_hash(files, args[0], args[1], self.max_upload_bytes)
                why = "it does not hold those files"
            except CopyFailed as exc:
                found, why = None, str(exc)
            if found != digest:
                upload.unlink(missing_ok=True)
                raise BuildFailed(
                    f"COPY {args[0]}: the upload named {digest} was refused and deleted: {why} "
                    "(build again to upload them)"
                )
            copy_into(layer, files, args[1])

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
