"""envd's ``filesystem.Filesystem`` service and its ``/files`` upload/download routes.

Every path resolves inside the sandbox's root (sweflow.sandbox.local.fsaccess: openat2 with
RESOLVE_IN_ROOT), so a symlink planted in a sandbox never reaches the host's files. Directory
watchers are not served: they answer UNIMPLEMENTED with a message saying so.
"""

from __future__ import annotations

import asyncio
import stat

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem.filesystem_pb import (
    EntryInfo,
    FileType,
    ListDirResponse,
    MakeDirResponse,
    MoveResponse,
    RemoveResponse,
    StatResponse,
)
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sweflow.e2b_endpoint.registry import Live, Registry, UnknownSandbox
from sweflow.sandbox.errors import SandboxConfigError, SandboxFileError
from sweflow.sandbox.local import fsaccess

FILE_TYPES = {"file": FileType.FILE, "dir": FileType.DIRECTORY}


def _names(live: Live, table: str) -> dict[int, str]:
    """uid or gid -> name from the sandbox's own /etc/passwd or /etc/group."""
    try:
        text = fsaccess.read_file(live.sandbox.root, f"/etc/{table}").decode(errors="replace")
    except SandboxFileError:
        return {}
    names = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) > 2 and fields[2].isdigit():
            names.setdefault(int(fields[2]), fields[0])
    return names


def entry_info(live: Live, entry: fsaccess.Entry) -> EntryInfo:
    seconds = int(entry.mtime)
    return EntryInfo(
        name=entry.name,
        type=FILE_TYPES.get(entry.kind, FileType.UNSPECIFIED),
        path=entry.path,
        size=entry.size,
        mode=stat.S_IMODE(entry.mode),
        permissions=stat.filemode(entry.mode),
        owner=_names(live, "passwd").get(entry.uid, str(entry.uid)),
        group=_names(live, "group").get(entry.gid, str(entry.gid)),
        modified_time=Timestamp(seconds=seconds, nanos=int((entry.mtime - seconds) * 1e9)),
        symlink_target=entry.symlink_target,
        is_symlink=entry.symlink_target is not None,
    )


def _rpc_error(exc: Exception) -> ConnectError:
    text = str(exc)
    if "No such file" in text or "Not a directory" in text:
        return ConnectError(Code.NOT_FOUND, text)
    if "File exists" in text:
        return ConnectError(Code.ALREADY_EXISTS, text)
    return ConnectError(Code.INVALID_ARGUMENT, text)


class FilesystemService:
    """The envd Filesystem service; the sandbox comes from the ``E2b-Sandbox-Id`` header."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def _live(self, ctx) -> Live:
        try:
            return self.registry.get(ctx.request_headers.get("e2b-sandbox-id", ""))
        except UnknownSandbox as exc:
            raise ConnectError(Code.NOT_FOUND, str(exc)) from None

    async def _run(self, call, *args):
        try:
            return await asyncio.to_thread(call, *args)
        except (SandboxFileError, SandboxConfigError) as exc:
            raise _rpc_error(exc) from None

    async def stat(self, request, ctx) -> StatResponse:
        live = self._live(ctx)
        entry = await self._run(fsaccess.stat_path, live.sandbox.root, request.path)
        return StatResponse(entry=entry_info(live, entry))

    async def list_dir(self, request, ctx) -> ListDirResponse:
        live = self._live(ctx)
        entries = await self._run(
            fsaccess.list_dir, live.sandbox.root, request.path, max(request.depth, 1)
        )
        return ListDirResponse(entries=[entry_info(live, entry) for entry in entries])

    async def make_dir(self, request, ctx) -> MakeDirResponse:
        live = self._live(ctx)
        if not await self._run(fsaccess.make_dirs, live.sandbox.root, request.path):
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {request.path} already exists")
        entry = await self._run(fsaccess.stat_path, live.sandbox.root, request.path)
        return MakeDirResponse(entry=entry_info(live, entry))

    async def move(self, request, ctx) -> MoveResponse:
        live = self._live(ctx)
        await self._run(fsaccess.move, live.sandbox.root, request.source, request.destination)
        entry = await self._run(fsaccess.stat_path, live.sandbox.root, request.destination)
        return MoveResponse(entry=entry_info(live, entry))

    async def remove(self, request, ctx) -> RemoveResponse:
        live = self._live(ctx)
        await self._run(fsaccess.remove, live.sandbox.root, request.path)
        return RemoveResponse()

    async def _no_watchers(self, request, ctx):
        raise ConnectError(
            Code.UNIMPLEMENTED, "directory watchers are not served by sweflow's endpoint"
        )

    watch_dir = create_watcher = get_watcher_events = remove_watcher = _no_watchers


# -- envd's HTTP file routes --------------------------------------------------------------------
def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def _http_status(exc: Exception) -> int:
    return 404 if "No such file" in str(exc) or "Not a directory" in str(exc) else 400


class FileRoutes:
    """``GET /files?path=`` (download) and ``POST /files?path=`` (octet-stream or multipart)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def _live(self, request: Request) -> Live:
        return self.registry.get(request.headers.get("e2b-sandbox-id", ""))

    async def download(self, request: Request) -> Response:
        path = request.query_params.get("path")
        if not path:
            return _error(400, "download needs ?path=")
        try:
            live = self._live(request)
            data = await asyncio.to_thread(fsaccess.read_file, live.sandbox.root, path)
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        except (SandboxFileError, SandboxConfigError) as exc:
            return _error(_http_status(exc), str(exc))
        return Response(data, media_type="application/octet-stream")

    async def upload(self, request: Request) -> Response:
        try:
            live = self._live(request)
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        files: list[tuple[str, bytes]] = []
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form()
            for _key, part in form.multi_items():
                if isinstance(part, str):
                    continue
                name = request.query_params.get("path") or part.filename or ""
                files.append((name, await part.read()))
        else:
            files.append((request.query_params.get("path", ""), await request.body()))
        written = []
        for path, data in files:
            if not path:
                return _error(400, "upload needs ?path= (or a filename per part)")
            try:
                await asyncio.to_thread(fsaccess.write_file, live.sandbox.root, path, data)
            except (SandboxFileError, SandboxConfigError) as exc:
                return _error(_http_status(exc), str(exc))
            written.append({"name": path.rpartition("/")[2], "type": "file", "path": path})
        return JSONResponse(written)
