"""The persistent-shell protocol shared by backends.

A bash loop inside the sandbox reads NUL-terminated (id, command) records from its stdin, runs
each with ``eval`` in the same shell (so cwd, variables and functions persist like a terminal),
and answers with an end marker that carries the id and the exit status. Running a command costs
a pipe write and read, not a process spawn. The state file lets a shell that had to be killed
(a timed-out builtin loop, an ``exit``) come back in the same directory with the same exports.
"""

from __future__ import annotations

import os
import re
import time

from sweflow.sandbox.base import ExecResult, wrap_command
from sweflow.sandbox.errors import SandboxConfigError
from sweflow.sandbox.spec import Limits

STATE_FILE = "/dev/shm/.sweflow-shell-state"


def driver(state_file: str = STATE_FILE) -> str:
    """The shell's loop, keeping its cwd and exports in ``state_file`` after each command."""
    return rf"""
unset __SF_DRIVER
set +o history 2>/dev/null
[ -r {state_file} ] && . {state_file} 2>/dev/null
while IFS= read -r -d '' __sf_id && IFS= read -r -d '' __sf_cmd; do
  eval "$__sf_cmd" </dev/null
  __sf_rc=$?
  {{ export -p; printf 'cd -- %q\n' "$PWD"; }} >{state_file} 2>/dev/null
  printf '\0\033SWF%s:%d\0' "$__sf_id" "$__sf_rc"
done
"""


DRIVER = driver()

# The loop travels in the environment so that ``ps`` inside shows a short command line.
SHELL_ARGV = ["/bin/bash", "--noprofile", "--norc", "-c", 'eval "$__SF_DRIVER"']
SHELL_ENV = {"__SF_DRIVER": DRIVER}

_MARKER = re.compile(rb"\x00\x1bSWF([0-9a-f]+):(-?\d+)\x00")
_MARKER_MAX = 64  # longest possible marker, kept back between chunks to catch split markers


def new_command_id() -> str:
    return os.urandom(8).hex()


def encode_command(command_id: str, cmd: str) -> bytes:
    if "\0" in cmd:
        raise SandboxConfigError("command contains a NUL byte, which a shell cannot receive")
    return command_id.encode() + b"\0" + cmd.encode("utf-8", "surrogateescape") + b"\0"


class OutputCollector:
    """Keeps the head and the tail of a stream within ``limit`` bytes; counts what it drops."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.limit // 2 - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        keep = self.limit - self.limit // 2
        if len(self._tail) > keep:
            cut = len(self._tail) - keep
            self.dropped += cut
            del self._tail[:cut]

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        out = bytes(self._head)
        if self.dropped:
            out += f"\n[... {self.dropped} bytes of output truncated ...]\n".encode()
        out += bytes(self._tail)
        return out.decode("utf-8", errors="replace")


class MarkerScanner:
    """Finds the end marker of one command in a byte stream, passing everything before it on."""

    def __init__(self, command_id: str, sink: OutputCollector) -> None:
        self.command_id = command_id.encode()
        self.sink = sink
        self._pending = b""
        self.exit_code: int | None = None

    def feed(self, chunk: bytes) -> bool:
        """Consume a chunk; True once this command's marker has been seen."""
        buf = self._pending + chunk
        while True:
            match = _MARKER.search(buf)
            if match is None:
                break
            self.sink.add(buf[: match.start()])
            buf = buf[match.end() :]
            if match.group(1) == self.command_id:
                self.exit_code = int(match.group(2))
                self._pending = b""
                return True
            # a stale marker from a command that was abandoned after its timeout: drop it
        start = buf.rfind(b"\x00\x1bSWF", max(0, len(buf) - _MARKER_MAX))
        if start == -1:
            start = max(0, len(buf) - 5)  # a split "\0\x1bSWF" prefix
        self.sink.add(buf[:start])
        self._pending = buf[start:]
        return False

    def flush(self) -> None:
        """Pass on whatever was held back (the command will not finish normally)."""
        self.sink.add(self._pending)
        self._pending = b""


class ShellCommand:
    """One exec() on its way through the protocol: the payload out, output and marker back.

    Backends differ in how they move bytes and kill on a timeout; this is what they share.
    """

    def __init__(
        self,
        cmd: str,
        limits: Limits,
        *,
        timeout: float | None,
        env: dict[str, str] | None,
        cwd: str | None,
        max_output: int | None,
    ) -> None:
        self.timeout = timeout if timeout is not None else limits.wall_time_s
        self.sink = OutputCollector(max_output or limits.output_bytes)
        command_id = new_command_id()
        self.payload = encode_command(command_id, wrap_command(cmd, cwd, env))
        self.scanner = MarkerScanner(command_id, self.sink)
        self.started = time.monotonic()

    def start(self) -> float | None:
        """Mark the moment the command is sent; returns its deadline (None: no timeout)."""
        self.started = time.monotonic()
        return self.started + self.timeout if self.timeout else None

    def result(self, exit_code: int, timed_out: bool) -> ExecResult:
        return ExecResult(
            exit_code=exit_code,
            output=self.sink.text(),
            timed_out=timed_out,
            truncated=self.sink.truncated,
            duration_s=time.monotonic() - self.started,
        )
