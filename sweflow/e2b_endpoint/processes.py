"""envd's ``process.Process`` service over local sandboxes: start, stream, attach, signal, stdin.

A process runs inside its sandbox through :meth:`LocalSandbox.launch` with pipes of its own, so
stdout and stderr stream apart, as envd's do. Its events fan out to every stream attached to it
(Start's own and any Connect); a stream that goes away leaves the process running, as envd does
(the SDK's ``disconnect``), and SendSignal reaches the process and what it started (its group).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process.process_pb import (
    CloseStdinResponse,
    ConnectResponse,
    ListResponse,
    ProcessConfig,
    ProcessEvent,
    ProcessInfo,
    SendInputResponse,
    SendSignalResponse,
    StartResponse,
    StreamInputResponse,
)
from protobuf import Oneof

from sweflow.e2b_endpoint.registry import Live, Registry, UnknownSandbox

READ_CHUNK = 64 << 10
GO_SIGNAL_NAMES = {
    signal.SIGKILL: "killed",
    signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupt",
}


def _event(field_name: str, value) -> ProcessEvent:
    return ProcessEvent(event=Oneof(field_name, value))


def _end_event(returncode: int) -> ProcessEvent:
    """envd's end event: Go's exit code (-1 when a signal ended it) and status text."""
    if returncode >= 0:
        end = ProcessEvent.EndEvent(
            exit_code=returncode, exited=True, status=f"exit status {returncode}"
        )
    else:
        sig = signal.Signals(-returncode)
        name = GO_SIGNAL_NAMES.get(sig, signal.strsignal(sig) or sig.name)
        end = ProcessEvent.EndEvent(exit_code=-1, exited=False, status=f"signal: {name}")
    return _event("end", end)


@dataclass
class Running:
    """A started process: its pid inside the sandbox, its pipes and the streams attached."""

    pid: int
    tag: str | None
    config: ProcessConfig
    proc: asyncio.subprocess.Process
    streams: set[asyncio.Queue] = field(default_factory=set)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def attach(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self.streams.add(queue)
        return queue

    def _send(self, event: ProcessEvent | None) -> None:
        for queue in self.streams:
            queue.put_nowait(event)

    async def pump(self) -> None:
        """Fan the output out as it comes, then the end event; None closes every stream."""

        async def forward(reader: asyncio.StreamReader | None, name: str) -> None:
            while reader is not None and (chunk := await reader.read(READ_CHUNK)):
                self._send(_event("data", ProcessEvent.DataEvent(output=Oneof(name, chunk))))

        await asyncio.gather(
            forward(self.proc.stdout, "stdout"), forward(self.proc.stderr, "stderr")
        )
        self._send(_end_event(await self.proc.wait()))
        self._send(None)
        self.ended.set()

    async def events(self, queue: asyncio.Queue) -> AsyncIterator[ProcessEvent]:
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self.streams.discard(queue)

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # nsenter's group: the process and what it started
        except ProcessLookupError:
            pass


class ProcessService:
    """The envd Process service; the sandbox comes from the ``E2b-Sandbox-Id`` header."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._running: dict[str, dict[int, Running]] = {}
        self._pumps: set[asyncio.Task] = set()

    # -- lookups -----------------------------------------------------------------------------
    def _live(self, ctx) -> Live:
        sandbox_id = ctx.request_headers.get("e2b-sandbox-id", "")
        try:
            return self.registry.get(sandbox_id)
        except UnknownSandbox as exc:
            raise ConnectError(Code.NOT_FOUND, str(exc)) from None

    def _table(self, live: Live) -> dict[int, Running]:
        return self._running.setdefault(live.id, {})

    def _find(self, ctx, selector) -> Running:
        table = self._table(self._live(ctx))
        match selector.selector if selector is not None else None:
            case Oneof(field="pid", value=pid):
                found = table.get(pid)
            case Oneof(field="tag", value=tag):
                found = next((run for run in table.values() if run.tag == tag), None)
            case _:
                raise ConnectError(Code.INVALID_ARGUMENT, "a process selector needs a pid or a tag")
        if found is None:
            raise ConnectError(Code.NOT_FOUND, f"process {selector.selector.value!r} not found")
        return found

    # -- RPCs --------------------------------------------------------------------------------
    async def start(self, request, ctx) -> AsyncIterator[StartResponse]:
        live = self._live(ctx)
        if request.pty is not None:
            raise ConnectError(
                Code.UNIMPLEMENTED, "PTY sessions are not served by sweflow's endpoint"
            )
        config = request.process
        if config is None or not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "start needs process.cmd")
        run = await self._spawn(live, config, request.tag or None, stdin=request.stdin is not False)
        queue = run.attach()
        task = asyncio.create_task(run.pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        task.add_done_callback(lambda _t: self._table(live).pop(run.pid, None))
        yield StartResponse(event=_event("start", ProcessEvent.StartEvent(pid=run.pid)))
        async for event in run.events(queue):
            yield StartResponse(event=event)

    async def connect(self, request, ctx) -> AsyncIterator[ConnectResponse]:
        run = self._find(ctx, request.process)
        queue = run.attach()
        yield ConnectResponse(event=_event("start", ProcessEvent.StartEvent(pid=run.pid)))
        async for event in run.events(queue):
            yield ConnectResponse(event=event)

    async def list(self, request, ctx) -> ListResponse:
        table = self._table(self._live(ctx))
        infos = [ProcessInfo(config=run.config, pid=run.pid, tag=run.tag) for run in table.values()]
        return ListResponse(processes=infos)

    async def send_signal(self, request, ctx) -> SendSignalResponse:
        run = self._find(ctx, request.process)
        value = request.signal.value if request.signal is not None else 0
        if value not in (signal.SIGKILL, signal.SIGTERM):
            raise ConnectError(Code.INVALID_ARGUMENT, f"signal {value} is not SIGKILL or SIGTERM")
        run.signal(value)
        return SendSignalResponse()

    async def send_input(self, request, ctx) -> SendInputResponse:
        await self._write(self._find(ctx, request.process), request.input)
        return SendInputResponse()

    async def stream_input(self, requests, ctx) -> StreamInputResponse:
        run = None
        async for request in requests:
            match request.event:
                case Oneof(field="start", value=start):
                    run = self._find(ctx, start.process)
                case Oneof(field="data", value=data) if run is not None:
                    await self._write(run, data.input)
        return StreamInputResponse()

    async def close_stdin(self, request, ctx) -> CloseStdinResponse:
        run = self._find(ctx, request.process)
        if run.proc.stdin is not None:
            run.proc.stdin.close()
        return CloseStdinResponse()

    async def update(self, request, ctx):
        raise ConnectError(Code.UNIMPLEMENTED, "PTY resize: sweflow's endpoint serves no PTY")

    # -- helpers -----------------------------------------------------------------------------
    async def _write(self, run: Running, data) -> None:
        """Write a ProcessInput's stdin bytes to the process."""
        match data.input if data is not None else None:
            case Oneof(field="stdin", value=chunk):
                if run.proc.stdin is None or run.proc.stdin.is_closing():
                    raise ConnectError(
                        Code.FAILED_PRECONDITION, f"process {run.pid}: stdin is closed"
                    )
                run.proc.stdin.write(chunk)
                await run.proc.stdin.drain()
            case _:
                raise ConnectError(
                    Code.UNIMPLEMENTED, "PTY input: sweflow's endpoint serves no PTY"
                )

    async def _spawn(
        self, live: Live, config: ProcessConfig, tag: str | None, *, stdin: bool
    ) -> Running:
        launch = live.sandbox.launch(
            [config.cmd, *config.args],
            cwd=config.cwd or None,
            env={**live.env, **dict(config.envs)},
            report_pid=True,
        )
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            env=launch.env,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=launch.preexec,
            start_new_session=True,  # its own group: a signal reaches what it starts
        )
        assert proc.stderr is not None
        line = await proc.stderr.readline()
        if not line.strip().isdigit():
            rest = await proc.stderr.read()
            await proc.wait()
            why = (line + rest).decode(errors="replace").strip()
            raise ConnectError(Code.INTERNAL, f"{config.cmd}: did not start in the sandbox: {why}")
        run = Running(int(line), tag, config, proc)
        self._table(live)[run.pid] = run
        return run

    def forget(self, sandbox_id: str) -> None:
        """Drop a killed or expired sandbox's table (its processes died with it)."""
        self._running.pop(sandbox_id, None)

    async def close(self) -> None:
        """Wait for the pumps of processes already killed with their sandboxes."""
        if self._pumps:
            await asyncio.wait(self._pumps, timeout=5)
