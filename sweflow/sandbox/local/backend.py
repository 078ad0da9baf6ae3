"""The container-free backend: user/mount/pid/net/ipc/uts namespaces, overlayfs, cgroups; root
inside is an unprivileged host identity (see the package docstring for the threat model).

Opening a sandbox is one exec of a small C init (see nsinit.c) that mounts the layers and starts
a persistent shell; every exec() afterwards is a pipe round trip to that shell. Closing it kills
the init, and the kernel takes every process and mount of the sandbox with it.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sweflow.sandbox.base import TIMEOUT_EXIT_CODE, ExecResult, Sandbox
from sweflow.sandbox.errors import SandboxConfigError, SandboxCrashError, SandboxStartError
from sweflow.sandbox.leases import HeldLeases, hold_leases
from sweflow.sandbox.local import fsaccess, hostroot, ids
from sweflow.sandbox.local.build import nsinit_path
from sweflow.sandbox.local.cgroups import SandboxCgroups
from sweflow.sandbox.local.pidns import host_pid_of, kill_started_since, started_since
from sweflow.sandbox.local.state import OPEN_TIMEOUT_S, registry, state_dir, write_owner
from sweflow.sandbox.procs import now_ticks, start_ticks, stat_fields
from sweflow.sandbox.shell import (
    SHELL_ARGV,
    SHELL_ENV,
    MarkerScanner,
    ShellCommand,
)
from sweflow.sandbox.spec import SandboxSpec

SHELL_GRACE_S = 2.0  # after killing a timed-out command's processes, how long the shell may take
READ_BATCH = 4 << 20  # most output read from the pipe before it goes to the collector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """A process to start on the host that runs inside a sandbox (see LocalSandbox.launch)."""

    argv: list[str]
    env: dict[str, str]
    preexec: Callable[[], None]  # run in the child before exec (joins the sandbox's cgroups)


class LocalSandbox(Sandbox):
    """A sandbox made of namespaces around an overlayfs of the spec's layers."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.id = uuid.uuid4().hex[:16]
        self.dir = state_dir().absolute() / self.id
        self._lock = threading.Lock()  # one exec at a time
        self._close_lock = threading.Lock()
        self._closed = False
        self._lifeline = -1
        self._ctl_buf = b""
        self._proc: subprocess.Popen[bytes] | None = None
        self._cgroups: SandboxCgroups | None = None
        self._upper: Path | None = None  # with upper="disk"
        self._work_dir: Path | None = None
        self._registered = False
        self.ids = ids.SandboxIds(os.getuid(), os.getgid(), 1)  # set by _start: its host identity
        self._leases = HeldLeases([])
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    @classmethod
    def collect_garbage(cls) -> dict[str, int]:
        """Remove the directories, cgroups and mounts of sandboxes whose keeper is gone."""
        from sweflow.sandbox.local.gc import collect_garbage

        report = collect_garbage()
        return {
            "live sandboxes kept": len(report.live),
            "directories removed": len(report.removed_dirs),
            "cgroups removed": len(report.removed_cgroups),
            "mounts removed": len(report.unmounted),
        }

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self) -> None:
        spec = self.spec
        self._leases = hold_leases(spec.leases)  # before a layer is looked at
        for layer in spec.layers:
            if not layer.is_dir():
                raise SandboxConfigError(f"layer {layer} is not a directory")
        if any(hostroot.is_host_root(layer) for layer in spec.layers):
            hostroot.check_allowed()
        self.dir.mkdir(parents=True)
        (self.dir / "merged").mkdir()
        (self.dir / "rw").mkdir()
        if spec.upper == "disk":
            assert spec.upper_dir is not None  # SandboxSpec checks it
            self._upper = spec.upper_dir.resolve()
            self._upper.mkdir(parents=True, exist_ok=True)
            self._work_dir = self._upper.parent / f".{self._upper.name}.work-{self.id}"
        owner = {
            "owner_pid": os.getpid(),
            "owner_start": start_ticks(os.getpid()),
            "work_dir": str(self._work_dir) if self._work_dir else None,
        }
        write_owner(self.dir, owner)  # before anything gc would remove: the cgroups, the work dir
        self._register()
        self.ids, id_lock = ids.allocate()
        try:
            self._launch(id_lock)
        finally:
            if id_lock >= 0:
                os.close(id_lock)  # the keeper holds it now, until the sandbox's end
        self.init_pid = int(self._await_ctl("pid", OPEN_TIMEOUT_S)[0])
        owner.update(keeper_pid=self._proc.pid, keeper_start=start_ticks(self._proc.pid))
        write_owner(self.dir, owner)
        self.shell_ns_pid = int(self._await_ctl("ready", OPEN_TIMEOUT_S)[0])
        self.root = f"/proc/{self.init_pid}/root"

    def _register(self) -> None:
        """Name this sandbox's state directory in the host-wide registry (see state.py)."""
        folder = registry()
        folder.mkdir(parents=True, exist_ok=True)
        os.symlink(self.dir.absolute(), folder / self.id)
        self._registered = True

    def _launch(self, id_lock: int) -> None:
        spec = self.spec
        argv = [str(nsinit_path()), "--sbdir", str(self.dir), "--workdir", spec.workdir]
        argv += ["--hostname", spec.hostname, "--tmp-size", str(spec.limits.tmp_bytes)]
        argv += ["--net", "1" if spec.network else "0", *self.ids.argv()]
        if id_lock >= 0:
            argv += ["--id-lock-fd", str(id_lock)]
        for layer in spec.layers:
            if hostroot.is_host_root(layer):
                argv += ["--host-lower", "/"]
                for path in hostroot.HOST_MASKED_PATHS:
                    argv += ["--mask", path]
            else:
                argv += ["--lower", str(layer.resolve())]
        if self._work_dir is not None:
            self._work_dir.mkdir()
            argv += ["--upper", str(self._upper), "--work", str(self._work_dir)]
        else:
            argv += ["--upper-size", str(spec.limits.upper_bytes)]
        for bind in spec.binds:
            argv += ["--bind" if bind.read_only else "--bind-rw", str(bind.source), bind.target]
        self._cgroups = SandboxCgroups(self.id, spec.limits)
        for procs in self._cgroups.procs_files:
            argv += ["--cgroup", str(procs)]
        ctl_r, ctl_w = os.pipe()
        life_r, self._lifeline = os.pipe()
        self._ctl = ctl_r
        argv += ["--ctl-fd", str(ctl_w), "--lifeline-fd", str(life_r), "--", *SHELL_ARGV]
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(ctl_w, life_r, *([id_lock] if id_lock >= 0 else [])),
                env={**spec.shell_env(), **SHELL_ENV},
                bufsize=0,
                start_new_session=True,  # no controlling terminal inside (no TIOCSTI tricks)
            )
        except BaseException:
            os.close(ctl_r)
            raise
        finally:
            os.close(ctl_w)
            os.close(life_r)
        self._out = self._proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._out, False)
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)
        self._poll.register(self._ctl, select.POLLIN)

    def _await_ctl(self, word: str, timeout: float) -> list[str]:
        """Wait for the control message ``word`` from the init; fail with its stderr if it dies.
        Other messages stay for their own wait: the init (in its new namespaces) may report
        "ready" before the keeper reports its pid, and a loaded host sees them in that order."""
        deadline = time.monotonic() + timeout
        others = b""
        while True:
            line, sep, rest = self._ctl_buf.partition(b"\n")
            if sep:
                fields = line.decode().split()
                if fields and fields[0] == word:
                    self._ctl_buf = others + rest
                    return fields[1:]
                others, self._ctl_buf = others + line + sep, rest
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                self._ctl_buf = others + self._ctl_buf
                raise SandboxStartError(
                    f"sandbox {self.id} did not report {word!r} within {timeout} s"
                    f"{_blocked_in(self.init_pid if word == 'ready' else self._proc.pid)}"
                )
            for fd, _ in self._poll.poll(left * 1000):
                if fd == self._ctl:
                    data = os.read(self._ctl, 4096)
                    if not data:
                        raise SandboxStartError(
                            f"sandbox failed to start: {self._drain_text().strip()}"
                        )
                    self._ctl_buf += data

    def _drain_text(self) -> str:
        chunks = []
        while True:
            try:
                data = os.read(self._out, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode(errors="replace")

    def close(self) -> None:
        """Kill the init (the kernel takes every process and mount with it), then clean up.

        Safe to call from another thread while an exec() runs: that exec fails at once.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        proc = self._proc
        if self._lifeline >= 0:
            os.close(self._lifeline)  # the keeper's cue to SIGKILL init
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                for pid in (getattr(self, "init_pid", 0), proc.pid):
                    if pid:
                        _kill(pid)
                proc.wait()
        with self._lock:
            if proc is not None:
                proc.stdin.close()  # type: ignore[union-attr]
                proc.stdout.close()  # type: ignore[union-attr]
                os.close(self._ctl)
            left = self._cgroups.remove() if self._cgroups is not None else []
            if self._work_dir is not None:
                shutil.rmtree(self._work_dir, ignore_errors=True)
            shutil.rmtree(self.dir, ignore_errors=True)
            if left:  # never a failed close: the registry entry stays, for gc to finish
                stay = ", ".join(map(str, left))
                log.warning("sandbox %s: cgroups %s stay; `sandbox gc` removes them", self.id, stay)
            elif self._registered:
                (registry() / self.id).unlink(missing_ok=True)
            self._leases.release()  # after the init is gone: the layers may go now

    # -- commands ---------------------------------------------------------------------------
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
        scanner = command.scanner
        with self._lock:
            if self._closed:
                raise SandboxCrashError(f"sandbox {self.id} is closed")
            tick = now_ticks()
            # an earlier command's background job may share this clock tick: it is not ours to kill
            spare = started_since(self.init_pid, tick)
            deadline = command.start()
            self._send(command.payload)
            exit_code = self._collect(scanner, deadline)
            timed_out = exit_code is None
            if timed_out:
                shell = self._shell_host_pid()
                killed = kill_started_since(self.init_pid, tick, keep=shell, spare=spare)
                # with nothing killed, the shell itself is busy (a builtin loop): no use waiting
                grace = SHELL_GRACE_S if killed else 0.0
                exit_code = self._collect(scanner, time.monotonic() + grace)
                if exit_code is None:  # the shell is stuck: replace it (init respawns it)
                    _kill(shell)
                    self._collect(scanner, time.monotonic() + OPEN_TIMEOUT_S)
                scanner.flush()
                exit_code = TIMEOUT_EXIT_CODE
        return command.result(exit_code, timed_out)

    def _send(self, payload: bytes) -> None:
        try:
            self._proc.stdin.write(payload)  # type: ignore[union-attr]
        except BrokenPipeError as exc:
            raise SandboxCrashError(f"sandbox {self.id} is gone (its init exited)") from exc

    def _collect(self, scanner: MarkerScanner, deadline: float | None) -> int | None:
        """Read output until the marker (exit code), the shell's death, or the deadline (None)."""
        while True:
            wait_ms = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
            events = self._poll.poll(wait_ms)
            if not events:
                return None
            for fd, _ in events:
                if fd == self._out:
                    data = self._read_out()
                    if scanner.feed(data):
                        return scanner.exit_code
                else:
                    data = os.read(self._ctl, 4096)
                    if not data:
                        raise self._gone(self._drain_text()[-2000:])
                    self._ctl_buf += data
                    code = self._shell_exit_code()
                    if code is not None:
                        scanner.feed(self._read_out())
                        scanner.flush()
                        return code

    def _read_out(self) -> bytes:
        """What the pipe holds now, at most READ_BATCH bytes: a command that writes faster than
        we read must not pile up in memory before the output cap drops the middle of it."""
        chunks = []
        total = 0
        while total < READ_BATCH:
            try:
                data = os.read(self._out, 1 << 20)
            except BlockingIOError:
                break
            if not data:
                raise self._gone("")
            chunks.append(data)
            total += len(data)
        return b"".join(chunks)

    def _gone(self, detail: str) -> SandboxCrashError:
        if self._closed:
            return SandboxCrashError(f"sandbox {self.id} was closed while a command ran")
        return SandboxCrashError(f"sandbox {self.id} died (its init exited) {detail}".strip())

    def _shell_exit_code(self) -> int | None:
        """Consume an ``exit CODE NEWPID`` control line (the shell died and was respawned)."""
        code = None
        while b"\n" in self._ctl_buf:
            line, _, self._ctl_buf = self._ctl_buf.partition(b"\n")
            fields = line.decode().split()
            if fields[0] == "exit":
                code, self.shell_ns_pid = int(fields[1]), int(fields[2])
        return code

    def _shell_host_pid(self) -> int:
        """Host pid of the shell, found from its pid inside the namespace."""
        return host_pid_of(self.init_pid, self.shell_ns_pid)

    def launch(
        self,
        argv: list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        report_pid: bool = False,
    ) -> Launch:
        """How to start ``argv`` inside this sandbox with pipes of one's own (the terminal, the
        E2B endpoint's processes): nsenter into its namespaces and root, ``cwd`` (default the
        workdir), its cgroups joined before exec. With ``report_pid``, the first line on its
        stderr is its pid inside the sandbox (the rest is the process's own)."""
        self._check_open()
        procs = [str(p) for p in self._cgroups.procs_files] if self._cgroups else []
        nsenter = ["nsenter", "-t", str(self.init_pid), "--user", "--mount", "--pid", "--net"]
        nsenter += ["--ipc", "--uts", "--cgroup", "--root", "--wd"]
        report = "echo $$ >&2; " if report_pid else ""
        script = report + 'cd -- "$1" || exit 127; shift; exec "$@"'
        start = ["/bin/sh", "-c", script, "sweflow-launch", cwd or self.spec.workdir, *argv]

        def join_cgroups() -> None:
            for path in procs:
                with open(path, "w") as f:
                    f.write(str(os.getpid()))

        return Launch([*nsenter, *start], {**self.spec.shell_env(), **(env or {})}, join_cgroups)

    def terminal(self) -> int:
        """An interactive bash joined to the sandbox's namespaces and cgroups (via nsenter)."""
        env = {"TERM": os.environ.get("TERM", "xterm"), "PS1": r"(sandbox) \w# "}
        launch = self.launch(["/bin/bash", "--login"], env=env)
        return subprocess.call(launch.argv, env=launch.env, preexec_fn=launch.preexec)

    # -- files ------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        self._check_open()
        return fsaccess.read_file(self.root, path)

    def write(self, path: str, data: bytes | str) -> None:
        self._check_open()
        fsaccess.write_file(self.root, path, data.encode() if isinstance(data, str) else data)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxCrashError(f"sandbox {self.id} is closed")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _blocked_in(pid: int) -> str:
    """Where process ``pid`` waits in the kernel, for an error about a sandbox that never became
    ready (a network namespace waiting for the kernel's rtnl lock, a stuck mount...): the top
    of its kernel stack where the host lets us read it (root), else its state alone."""
    fields = stat_fields(pid)
    if fields is None:
        return f" (process {pid} is gone)"
    try:
        frames = [
            line.split()[-1].split("+")[0]
            for line in Path(f"/proc/{pid}/stack").read_text().splitlines()
        ]
    except OSError:
        frames = []
    where = f", in {' < '.join(frames[:4])}" if frames else ""
    return f" (process {pid}: state {fields[0]}{where})"
