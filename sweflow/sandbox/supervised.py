"""The persistent shell under a supervisor, for backends that reach it through a byte stream.

The docker and e2b backends cannot respawn the shell from the host as the local backend's init
does, so a small bash supervisor inside runs the shell protocol's driver (sweflow.sandbox.shell),
marks each exit of it on the stream (``\\eSWX<nonce>:<code>\\0``) and starts it again; the new
shell restores cwd and exports from the state file. Standard error is merged into standard
output inside, so ordering is exact.

Timeouts. A second process beside the shell runs :data:`KILL_SCRIPT`: it kills every process
that started after the command began (``/proc/<pid>/stat`` field 22) and descends from the
supervisor or from PID 1 (where orphans go): the supervisor, the shell, earlier background jobs
and processes entered from outside (``docker exec``, the endpoint's other commands) live on.
If that killed nothing (the shell itself is looping in a builtin), or the marker does not come
within 2 s, the shell is killed and the supervisor starts a new one. Where the script cannot
run, or no shell answers, the backend's last resort (:meth:`SupervisedShell._kill_all`) runs.

:class:`SupervisedShell` holds the exec algorithm; a backend supplies the transport: send bytes,
read bytes until a deadline, run a process beside the shell, and what to do when the stream ends.
A backend that sees the sandbox's processes from the host (scratch) kills them itself instead.
"""

from __future__ import annotations

import re
import threading
import time
from abc import abstractmethod

from sweflow.sandbox.base import TIMEOUT_EXIT_CODE, ExecResult, Sandbox
from sweflow.sandbox.errors import SandboxCrashError
from sweflow.sandbox.procs import now_ticks
from sweflow.sandbox.shell import MarkerScanner, ShellCommand

SHELL_GRACE_S = 2.0
SHELL_BACK_S = 60.0  # how long a killed shell may take to come back
SHELL_PID_FILE = "/dev/shm/.sweflow-shell-pid"


def supervisor(pid_file: str = SHELL_PID_FILE) -> str:
    """Runs the shell protocol's driver, reports each exit of it (the shell's pid in
    ``pid_file``), starts it again."""
    return rf"""
exec 2>/dev/null
__sf_nonce=$__SF_NONCE
unset __SF_NONCE __SF_SUPERVISOR
while :; do
  /bin/bash --noprofile --norc -c 'exec 2>&1; echo "$$" >{pid_file}; eval "$__SF_DRIVER"'
  printf '\033SWX%s:%d\0' "$__sf_nonce" "$?"
done
"""


SUPERVISOR = supervisor()
SUPERVISOR_ARGV = ["/bin/bash", "--noprofile", "--norc", "-c", 'eval "$__SF_SUPERVISOR"']

# Run beside the shell on a timeout. $1: "cmd" (kill what the command started; the shell too if
# that was nothing) or "shell"; $2: the command's start in host boot-clock ticks; $3: the host's
# boot clock now; $4: the supervisor's pid. When the
# sandbox's clock is not the host's (another kernel: a remote daemon, a cloud sandbox), the start
# is computed from the elapsed time instead.
KILL_SCRIPT = rf"""
mode=$1; t=$2; hnow=$3; top=$4; self=$$
read -r up _ </proc/uptime; cnow=$((10#${{up/./}}))
d=$((cnow - hnow)); if [ "$d" -lt -200 ] || [ "$d" -gt 200 ]; then t=$((cnow - (hnow - t) - 10)); fi
shell=; read -r shell <{SHELL_PID_FILE} 2>/dev/null
killed=0
if [ "$mode" = cmd ]; then
  for ((round = 0; round < 200; round++)); do
    declare -A pp=() st=() zz=()
    for f in /proc/[0-9]*/stat; do
      p=${{f#/proc/}}; p=${{p%/stat}}
      read -r s <"$f" 2>/dev/null || continue
      s=${{s##*) }}; set -- $s
      pp[$p]=$2; st[$p]=${{20}}; zz[$p]=$1
    done
    declare -A mine=(); q=$self; n=0  # this script's own ancestors are never victims
    while [ -n "$q" ] && [ "$q" != 0 ] && [ $n -lt 4096 ]; do
      mine[$q]=1; q=${{pp[$q]}}; n=$((n+1))
    done
    victims=()
    for p in "${{!pp[@]}}"; do
      case $p in 1|"$top"|"$shell") continue;; esac
      [ -z "${{mine[$p]}}" ] && [ "${{zz[$p]}}" != Z ] && [ "${{st[$p]}}" -ge "$t" ] || continue
      # the supervisor's descendants, and orphans they left to PID 1; not processes entered
      # from outside (ppid 0: docker exec, the endpoint's other commands)
      q=$p; n=0
      while [ -n "$q" ] && [ "$q" != 0 ] && [ "$q" != "$top" ] && [ "$q" != 1 ]; do
        q=${{pp[$q]}}; n=$((n+1)); [ $n -lt 4096 ] || break
      done
      case $q in "$top"|1) victims+=("$p");; esac
    done
    [ ${{#victims[@]}} -eq 0 ] && break
    kill -9 "${{victims[@]}}" 2>/dev/null
    killed=$((killed + ${{#victims[@]}}))
    unset pp st zz mine
  done
fi
if [ "$mode" = shell ] || [ "$killed" -eq 0 ]; then
  [ -n "$shell" ] && kill -9 "$shell" 2>/dev/null && echo "shell"
fi
echo "killed $killed"
"""


class ExitScanner:
    """Takes the supervisor's "the shell exited" marker out of the stream before MarkerScanner."""

    def __init__(self, nonce: str) -> None:
        self.prefix = b"\x1bSWX" + nonce.encode() + b":"
        self._marker = re.compile(re.escape(self.prefix) + rb"(-?\d+)\x00")
        self._pending = b""

    def feed(self, chunk: bytes) -> tuple[bytes, int | None, bytes]:
        """(bytes before the exit marker, its code or None, bytes after it)."""
        buf = self._pending + chunk
        self._pending = b""
        match = self._marker.search(buf)
        if match:
            return buf[: match.start()], int(match.group(1)), buf[match.end() :]
        keep = self._partial_start(buf)
        self._pending = buf[keep:]
        return buf[:keep], None, b""

    def _partial_start(self, buf: bytes) -> int:
        """Where an unfinished exit marker may begin at the end of ``buf`` (len(buf) if nowhere)."""
        start = buf.rfind(b"\x1b", max(0, len(buf) - len(self.prefix) - 24))
        if start == -1:
            return len(buf)
        tail = buf[start:]
        n = min(len(tail), len(self.prefix))
        if tail[:n] != self.prefix[:n]:
            return len(buf)
        if len(tail) > len(self.prefix) and not re.fullmatch(rb"-?\d*", tail[len(self.prefix) :]):
            return len(buf)
        return start


class StreamEnded(Exception):
    """The supervisor's stream closed (the container stopped, the cloud sandbox went away)."""


class SupervisedShell(Sandbox):
    """exec() over a supervised shell; subclasses move the bytes (see the module docstring).

    A subclass sets ``_exits`` (an :class:`ExitScanner` for its nonce) whenever its stream
    starts and ``_lock`` (one command at a time), and implements the transport methods below.
    """

    _exits: ExitScanner
    _lock: threading.Lock
    supervisor_pid = "1"  # the supervisor's pid inside, as KILL_SCRIPT's $4

    @abstractmethod
    def _send(self, payload: bytes) -> None:
        """Write to the shell's stdin (SandboxCrashError when it cannot)."""

    @abstractmethod
    def _read(self, deadline: float | None) -> bytes | None:
        """Stream bytes (maybe b""), None when ``deadline`` passed first; StreamEnded at the end."""

    @abstractmethod
    def _restart(self) -> int:
        """After StreamEnded: bring the supervisor back (or raise SandboxCrashError); its code."""

    def _run_beside(self, argv: list[str]) -> tuple[int, bytes]:
        """Run ``argv`` inside next to the shell: (exit code, stdout); SandboxCrashError if not.

        What :meth:`_kill_command` runs KILL_SCRIPT with; a backend that overrides that (it sees
        the sandbox's processes from the host) needs no other process inside."""
        raise NotImplementedError

    @abstractmethod
    def _kill_all(self) -> None:
        """Last resort when no shell answers: end everything inside; the stream then ends."""

    @abstractmethod
    def _check_open(self) -> None:
        """SandboxCrashError if the sandbox was closed."""

    # -- exec ---------------------------------------------------------------------------------
    def exec(
        self,
        cmd: str,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        max_output: int | None = None,
    ) -> ExecResult:
        command = ShellCommand(
            cmd, self.spec.limits, timeout=timeout, env=env, cwd=cwd, max_output=max_output
        )
        with self._lock:
            self._before_exec()
            return self._exec_locked(command)

    def _before_exec(self) -> None:
        """A hook run under the exec lock before each command (the e2b backend renews)."""

    def _exec_locked(self, command: ShellCommand) -> ExecResult:
        """One command through the supervised shell, under the exec lock."""
        scanner = command.scanner
        self._check_open()
        tick = now_ticks()
        scanner.feed(self._drain_pending())  # what background jobs printed meanwhile
        deadline = command.start()
        self._send(command.payload)
        exit_code, _ = self._collect(scanner, deadline)
        if exit_code is None:  # the marker may have come with the deadline: one last look
            exit_code, _ = self._collect(scanner, time.monotonic())
        timed_out = exit_code is None
        if timed_out:
            _, shell_killed = self._kill_command(tick, "cmd")
            if not shell_killed:
                exit_code, _ = self._collect(scanner, time.monotonic() + SHELL_GRACE_S)
                if exit_code is None:
                    _, shell_killed = self._kill_command(tick, "shell")
                    if not shell_killed:  # no shell to kill: the backend's last resort
                        self._kill_all()
                        shell_killed = True
            if shell_killed:  # wait for the supervisor's exit marker: a new shell is up
                self._await_shell_exit(scanner)
            scanner.flush()
            exit_code = TIMEOUT_EXIT_CODE
        return command.result(exit_code, timed_out)

    def _drain_pending(self) -> bytes:
        """Output that arrived between commands; restarts a supervisor that ended meanwhile."""
        out = []
        while True:
            try:
                data = self._read(time.monotonic())
            except StreamEnded:
                self._check_open()
                self._restart()
                break
            if data is None:
                break
            before, code, after = self._exits.feed(data)
            out.append(before)
            if code is not None:  # the shell died between commands; a new one is up
                out.append(after)
        return b"".join(out)

    def _collect(self, scanner: MarkerScanner, deadline: float | None) -> tuple[int | None, str]:
        """Output until the end marker or the shell's exit: (exit code, "marker"|"exit"|"restart").

        The code is None when the deadline passed first.
        """
        while True:
            try:
                data = self._read(deadline)
            except StreamEnded:  # report the supervisor's end and bring it back
                self._check_open()
                scanner.feed(self._exits.feed(b"")[0])
                scanner.flush()
                return self._restart(), "restart"
            if data is None:
                return None, "deadline"
            before, code, _after = self._exits.feed(data)
            if scanner.feed(before):
                return scanner.exit_code, "marker"
            if code is not None:  # the shell exited; the supervisor has started a new one
                scanner.flush()
                return code, "exit"

    def _await_shell_exit(self, scanner: MarkerScanner) -> None:
        deadline = time.monotonic() + SHELL_BACK_S
        while True:
            code, how = self._collect(scanner, deadline)
            if code is None:
                raise SandboxCrashError(
                    f"sandbox {self.id}: its shell did not come back after a kill"  # type: ignore[attr-defined]
                )
            if how != "marker":
                return

    def _kill_command(self, tick: int, mode: str) -> tuple[int, bool]:
        """Kill what the timed-out command started (or the shell): (processes killed, shell?).

        ``mode`` "cmd": the processes started at ``tick`` or later, the shell too if that was
        none; "shell": the shell.

        When that script cannot even start (a fork bomb holds every pid there is), the backend's
        last resort runs instead, which brings a new shell with cwd and exports reset.
        """
        argv = [
            "/bin/bash",
            "-c",
            KILL_SCRIPT,
            "kill",
            mode,
            str(tick),
            str(now_ticks()),
            self.supervisor_pid,
        ]
        try:
            code, out = self._run_beside(argv)
        except SandboxCrashError:
            self._check_open()
            code, out = -1, b""
        text = out.decode(errors="replace")
        match = re.search(r"killed (\d+)", text)
        if code != 0 or match is None:
            self._kill_all()
            return 0, True
        return int(match.group(1)), "shell" in text.split()
