"""envd's ``filesystem.Filesystem`` service and its ``/files`` upload/download routes.

Every path resolves inside the sandbox's root (sweflow.sandbox.local.fsaccess: openat2 with
RESOLVE_IN_ROOT), so a symlink planted in a sandbox never reaches the host's files, and only
regular files are read or written (a FIFO is refused, never opened to block). File operations
run on :class:`FileOps`' own threads, a few at once and each bounded in time, so that however
they go, creates, the reaper and shutdown keep their threads. Uploads are capped at
``MAX_FILE_BYTES``, as reads are. Directory watchers are not served: they answer UNIMPLEMENTED
with a message saying so.
"""

from __future__ import annotations

import asyncio
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

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

from sweflow.e2b_endpoint.bodies import BadRequest, read_capped
from sweflow.e2b_endpoint.registry import Live, Registry, UnknownSandbox
from sweflow.sandbox.errors import SandboxConfigError, SandboxFileError
from sweflow.sandbox.local import fsaccess

FILE_TYPES = {"file": FileType.FILE, "dir": FileType.DIRECTORY}
MAX_FILE_BYTES = fsaccess.MAX_READ_BYTES
FILE_OP_WORKERS = 8
FILE_OP_TIMEOUT_S = 60.0
T = TypeVar("T")


class FileOpBusy(Exception):
    """Every file-operation thread stayed busy for the whole timeout."""


class FileOps:
    """Runs file operations on daemon threads of their own, ``workers`` at once at most.

    A call waits at most ``timeout`` seconds for a free slot (then :class:`FileOpBusy`) and as
    long again for its result (then :class:`TimeoutError`). A thread that never returns keeps
    its slot, so stuck calls use up these threads only, never asyncio's default ones (creates,
    the reaper), and being daemons they do not hold the process up at SIGINT or SIGTERM.
    """

    def __init__(self, workers: int = FILE_OP_WORKERS, timeout: float = FILE_OP_TIMEOUT_S):
        self.timeout = timeout
        self._slots = asyncio.Semaphore(workers)

    async def run(self, call: Callable[..., T], *args) -> T:
        try:
            await asyncio.wait_for(self._slots.acquire(), self.timeout)
        except TimeoutError:
            raise FileOpBusy(f"all file operations stayed busy for {self.timeout:.0f} s") from None
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def settle(result, error) -> None:
            self._slots.release()
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def work() -> None:
            try:
                result, error = call(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting request
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:
                pass  # the loop is closed: the endpoint has stopped

        threading.Thread(target=work, name="e2b-file-op", daemon=True).start()
        return await asyncio.wait_for(done, self.timeout)


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
    uid, gid = live.sandbox.ids.inside(entry.uid, entry.gid)  # the host sees its shifted ids
    return EntryInfo(
        name=entry.name,
        type=FILE_TYPES.get(entry.kind, FileType.UNSPECIFIED),
        path=entry.path,
        size=entry.size,
        mode=stat.S_IMODE(entry.mode),
        permissions=stat.filemode(entry.mode),
        owner=_names(live, "passwd").get(uid, str(uid)),
        group=_names(live, "group").get(gid, str(gid)),
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


def _stat_info(live: Live, path: str) -> EntryInfo:
    return entry_info(live, fsaccess.stat_path(live.sandbox.root, path))


class FilesystemService:
    """The envd Filesystem service; the sandbox comes from the ``E2b-Sandbox-Id`` header."""

    def __init__(self, registry: Registry, file_ops: FileOps) -> None:
        self.registry = registry
        self.file_ops = file_ops

    def _live(self, ctx) -> Live:
        try:
            return self.registry.get(ctx.request_headers.get("e2b-sandbox-id", ""))
        except UnknownSandbox as exc:
            raise ConnectError(Code.NOT_FOUND, str(exc)) from None

    async def _run(self, call, *args):
        try:
            return await self.file_ops.run(call, *args)
        except (SandboxFileError, SandboxConfigError) as exc:
            raise _rpc_error(exc) from None
        except FileOpBusy as exc:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, str(exc)) from None
        except TimeoutError:
            raise ConnectError(Code.DEADLINE_EXCEEDED, "the file operation timed out") from None

    async def stat(self, request, ctx) -> StatResponse:
        return StatResponse(entry=await self._run(_stat_info, self._live(ctx), request.path))

    async def list_dir(self, request, ctx) -> ListDirResponse:
        live = self._live(ctx)

        def listed() -> list[EntryInfo]:
            entries = fsaccess.list_dir(live.sandbox.root, request.path, max(request.depth, 1))
            return [entry_info(live, entry) for entry in entries]

        return ListDirResponse(entries=await self._run(listed))

    async def make_dir(self, request, ctx) -> MakeDirResponse:
        live = self._live(ctx)
        if not await self._run(fsaccess.make_dirs, live.sandbox.root, request.path):
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {request.path} already exists")
        return MakeDirResponse(entry=await self._run(_stat_info, live, request.path))

    async def move(self, request, ctx) -> MoveResponse:
        live = self._live(ctx)
        await self._run(fsaccess.move, live.sandbox.root, request.source, request.destination)
        return MoveResponse(entry=await self._run(_stat_info, live, request.destination))

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

    def __init__(self, registry: Registry, file_ops: FileOps) -> None:
        self.registry = registry
        self.file_ops = file_ops

    def _live(self, request: Request) -> Live:
        return self.registry.get(request.headers.get("e2b-sandbox-id", ""))

    async def _run(self, call, *args) -> JSONResponse | object:
        """``call(*args)`` on a file-operation thread; an error reply for what went wrong."""
        try:
            return await self.file_ops.run(call, *args)
        except (SandboxFileError, SandboxConfigError) as exc:
            return _error(_http_status(exc), str(exc))
        except FileOpBusy as exc:
            return _error(503, str(exc))
        except TimeoutError:
            return _error(504, "the file operation timed out")

    async def download(self, request: Request) -> Response:
        path = request.query_params.get("path")
        if not path:
            return _error(400, "download needs ?path=")
        try:
            live = self._live(request)
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        data = await self._run(_read, live, path)
        if isinstance(data, Response):
            return data
        return Response(data, media_type="application/octet-stream")

    async def upload(self, request: Request) -> Response:
        try:
            live = self._live(request)
            await read_capped(request, MAX_FILE_BYTES)
        except UnknownSandbox as exc:
            return _error(404, str(exc))
        except BadRequest as exc:
            return _error(exc.status, str(exc))
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
            failed = await self._run(fsaccess.write_file, live.sandbox.root, path, data)
            if isinstance(failed, Response):
                return failed
            written.append({"name": path.rpartition("/")[2], "type": "file", "path": path})
        return JSONResponse(written)


def _read(live: Live, path: str) -> bytes:
    return fsaccess.read_file(live.sandbox.root, path, readable_by_all=live.host_files)
