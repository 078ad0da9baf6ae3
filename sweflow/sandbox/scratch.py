"""The ``scratch`` backend: the layers copied into a scratch directory, a persistent bash on the
host. It isolates nothing: for tests and trusted code only, never for a policy's patch.

Why it exists: a test about the agent loop, grading arithmetic or a pipeline's plumbing needs a
real shell, real git and real files, not a rootfs, root or namespaces. Opening one costs a copy
of the (small) layers and a bash start, a few milliseconds.

Paths are the host's. Without a mount namespace no ``/testbed`` can exist for one sandbox alone,
so nothing pretends it does: the layers are copied, lowest first and whiteouts honoured, into a
fresh directory ROOT, and the sandbox's workdir is ROOT + ``spec.workdir``, which the sandbox's
own ``spec.workdir`` reports. Code that asks the sandbox for its workdir (the agent, ``diff()``)
runs unchanged; a command that names ``/testbed`` itself sees the host's. ``read()`` and
``write()`` take host paths and refuse one outside ROOT (symlinks followed), so that a slip does
not write over the host's files. The host's ``/`` as a layer is not copied: it is what the shell
runs on anyway. ``HOME`` and ``TMPDIR`` are folders of the sandbox's beside ROOT, unless the
spec sets them, and each ``PATH`` directory the copy has comes first (ROOT/usr/local/bin before
/usr/local/bin): a layer's programs shadow the host's, as in an overlay.

Kept from the protocol: the shell's state between calls and after ``exit`` or a kill, the output
cap, timeouts that kill every process the command started, ``diff()``, and ``close()`` killing
every process and removing the directory. The bash supervisor is a child subreaper
(PR_SET_CHILD_SUBREAPER, set by the tiny ``subreaper.c``, compiled with ``cc`` at first use as
the local backend's init is), so an orphan is adopted by it rather than by the host's init: the
sandbox's processes are exactly the supervisor's descendants. Not kept: read-only layers (they
are copies), memory, pids and CPU limits, the network switch (the host's network is there),
the hostname, binds, a disk upper, a terminal, and any boundary at all around the code. An
owner that dies without closing leaves its directory (``sweflow sandbox gc`` removes it) and
whatever background job still runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from sweflow.sandbox.base import require_absolute, require_file_path
from sweflow.sandbox.errors import SandboxConfigError, SandboxCrashError, SandboxFileError
from sweflow.sandbox.leases import HeldLeases, hold_leases
from sweflow.sandbox.local.build import compiled
from sweflow.sandbox.procs import descendants_of, owner_id, owner_is_gone
from sweflow.sandbox.shell import driver
from sweflow.sandbox.spec import SandboxSpec
from sweflow.sandbox.supervised import (
    SUPERVISOR_ARGV,
    ExitScanner,
    StreamEnded,
    SupervisedShell,
    supervisor,
)

OWNER_FILE = "owner.json"
KILL_ROUNDS = 100  # a process forking while the tree is killed: its child is caught next round
SUBREAPER = Path(__file__).with_name("subreaper.c")  # runs the supervisor as a subreaper
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./-]+")  # the control files' paths go into shell lines


def scratch_root() -> Path:
    """Where scratch sandboxes live: ``$SWEFLOW_SCRATCH_DIR``, else in RAM (/dev/shm) as the
    local backend's writable layer is (a copy and its removal there cost a third of what they
    cost on disk), else under the temp folder."""
    if env := os.environ.get("SWEFLOW_SCRATCH_DIR"):
        return Path(env)
    shm = Path("/dev/shm")
    base = shm if os.access(shm, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())
    return base / f"sweflow-scratch-{os.geteuid()}"


class ScratchSandbox(SupervisedShell):
    """A copy of the spec's layers and a bash on the host; see the module docstring."""

    isolated = False

    def __init__(self, spec: SandboxSpec) -> None:
        _check_spec(spec)
        self.id = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()  # one command at a time on the shell's pipes
        self._state_lock = threading.Lock()
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._nonce = os.urandom(8).hex()
        self._leases = HeldLeases([])
        self.dir: Path | None = None
        self.spec = spec
        try:
            self._start(spec)
        except BaseException:
            self.close()
            raise

    @classmethod
    def collect_garbage(cls) -> dict[str, int]:
        """Remove the directories of scratch sandboxes whose owning process is gone."""
        removed = 0
        root = scratch_root()
        for directory in sorted(root.iterdir()) if root.is_dir() else []:
            try:
                owner = json.loads((directory / OWNER_FILE).read_text())["owner"]
            except (OSError, ValueError, KeyError):
                continue  # still opening, or not a sandbox's
            if owner_is_gone(owner):
                shutil.rmtree(directory, ignore_errors=True)
                removed += 1
        return {"directories removed": removed}

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self, spec: SandboxSpec) -> None:
        self._leases = hold_leases(spec.leases)  # before a layer is looked at
        scratch_root().mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.id}-", dir=scratch_root())).resolve()
        if not _SAFE_PATH.fullmatch(str(self.dir)):
            raise SandboxConfigError(
                f"scratch directory {self.dir} has characters a shell line cannot hold "
                "unquoted: set SWEFLOW_SCRATCH_DIR to a plain path"
            )
        (self.dir / OWNER_FILE).write_text(json.dumps({"owner": owner_id()}))
        self.root = self.dir / "root"
        for name in ("root", "home", "tmp", "ctl"):
            (self.dir / name).mkdir()
        for layer in spec.layers:
            if layer.resolve() != Path("/"):  # the host's own files: the shell runs on them
                _merge(str(layer), str(self.root))
        workdir = os.path.normpath(f"{self.root}/{spec.workdir}")
        os.makedirs(workdir, exist_ok=True)
        self.spec = spec.model_copy(update={"workdir": workdir})
        self.diff_index = str(self.dir / "ctl" / "diff-index")
        env = spec.shell_env()
        for name, folder in (("HOME", "home"), ("TMPDIR", "tmp")):
            if name not in spec.env:
                env[name] = str(self.dir / folder)
        env["PATH"] = _layered_path(env["PATH"], str(self.root))
        self._env = {
            **env,
            "__SF_DRIVER": driver(str(self.dir / "ctl" / "shell-state")),
            "__SF_SUPERVISOR": supervisor(str(self.dir / "ctl" / "shell-pid")),
            "__SF_NONCE": self._nonce,
        }
        self._boot()

    def _boot(self) -> None:
        """Start the supervisor (whose shell restores cwd and exports from the state file)."""
        self._proc = subprocess.Popen(
            [str(compiled(SUBREAPER)), *SUPERVISOR_ARGV],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.spec.workdir,
            env=self._env,
            bufsize=0,
            start_new_session=True,  # the terminal's Ctrl-C reaches the owner, not the shell
        )
        self._in = self._proc.stdin.fileno()  # type: ignore[union-attr]
        self._out = self._proc.stdout.fileno()  # type: ignore[union-attr]
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)
        self._exits = ExitScanner(self._nonce)

    def _restart(self) -> int:
        """The supervisor's stream ended (it was killed): start a new one; its exit code."""
        proc = self._proc
        assert proc is not None
        code = proc.wait()
        self._close_pipes()
        self._boot()
        return 128 - code if code < 0 else code

    def close(self) -> None:
        """Kill every process of the sandbox and remove its directory; safe to call twice."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        if self._proc is not None:
            self._kill_everything()  # the stream ends: an exec() in another thread stops
            self._proc.wait()
            with self._lock:
                self._close_pipes()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self._leases.release()

    def _close_pipes(self) -> None:
        for pipe in (self._proc.stdin, self._proc.stdout):  # type: ignore[union-attr]
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]

    # -- the transport of SupervisedShell ---------------------------------------------------
    def _send(self, payload: bytes) -> None:
        view = memoryview(payload)
        try:
            while view:
                view = view[os.write(self._in, view) :]
        except OSError as exc:
            self._check_open()
            raise SandboxCrashError(f"sandbox {self.id}: cannot write to its shell: {exc}") from exc

    def _read(self, deadline: float | None) -> bytes | None:
        wait_ms = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
        if not self._poll.poll(wait_ms):
            return None
        data = os.read(self._out, 1 << 20)
        if not data:
            raise StreamEnded
        return data

    def _kill_command(self, tick: int, mode: str) -> tuple[int, bool]:
        """The processes started at ``tick`` or later, the shell spared (mode "cmd"); the shell
        when that killed nothing or in mode "shell". Read from the host's /proc."""
        shell = self._shell_pid()
        killed = 0
        if mode == "cmd":
            killed = self._kill_tree(lambda pid, start: pid != shell and start >= tick)
        if mode == "shell" or killed == 0:
            return killed, shell is not None and _kill(shell)
        return killed, False

    def _kill_all(self) -> None:
        """Every process of the sandbox, the supervisor last; _restart brings it back."""
        self._kill_everything()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxCrashError(f"sandbox {self.id} is closed")

    def _shell_pid(self) -> int | None:
        try:
            return int((self.dir / "ctl" / "shell-pid").read_text())  # type: ignore[operator]
        except (OSError, ValueError):
            return None

    def _kill_tree(self, chosen) -> int:
        """SIGKILL the supervisor's descendants that ``chosen(pid, start)`` picks, round after
        round until none is left (a child forked meanwhile is adopted and caught next)."""
        assert self._proc is not None
        total = 0
        for _ in range(KILL_ROUNDS):
            victims = [pid for pid, start in descendants_of(self._proc.pid) if chosen(pid, start)]
            if not victims:
                break
            total += sum(_kill(pid) for pid in victims)
        return total

    def _kill_everything(self) -> None:
        """The supervisor stopped (so it starts no new shell), its descendants, then itself."""
        proc = self._proc
        assert proc is not None
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGSTOP)
        self._kill_tree(lambda _pid, _start: True)
        _kill(proc.pid)

    # -- files ------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        self._check_open()
        require_absolute(path)
        real = self._inside(path, "read")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a fifo: no wait
        except OSError as exc:
            raise SandboxFileError(f"cannot read {path} in the sandbox: {exc.strerror}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SandboxFileError(f"cannot read {path} in the sandbox: not a regular file")
        with open(fd, "rb") as f:
            return f.read()

    def write(self, path: str, data: bytes | str) -> None:
        self._check_open()
        require_file_path(path)
        real = self._inside(path, "write")
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            with open(real, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        except OSError as exc:
            raise SandboxFileError(f"cannot write {path} in the sandbox: {exc.strerror}") from exc

    def _inside(self, path: str, what: str) -> str:
        """``path`` with its symlinks resolved, if that lies in the sandbox's copy."""
        real = os.path.realpath(path)
        root = str(self.root)
        if os.path.commonpath([real, root]) != root:
            raise SandboxFileError(
                f"cannot {what} {path}: a scratch sandbox's files are under {root}"
                + (f" ({path} leads to {real})" if real != path else "")
            )
        return real


def _check_spec(spec: SandboxSpec) -> None:
    """Refuse, before anything is made, what this backend cannot do at all."""
    for what, asked in (("binds", spec.binds), ("upper='disk'", spec.upper == "disk")):
        if asked:
            raise SandboxConfigError(
                f"the scratch backend has no {what}: its files are a copy on the host, neither "
                "mounts nor a layer to capture; use the local backend"
            )
    for layer in spec.layers:
        if not layer.is_dir():
            raise SandboxConfigError(f"layer {layer} is not a directory")


def _layered_path(path: str, root: str) -> str:
    """``path`` with each directory's copy in ``root`` before it: the layers' programs shadow
    the host's, as they would in an overlay of the two."""
    entries = []
    for entry in path.split(":"):
        if entry.startswith("/") and os.path.isdir(root + entry):
            entries.append(root + entry)
        entries.append(entry)
    return ":".join(entries)


def _merge(src: str, dst: str) -> None:
    """Copy layer directory ``src`` over ``dst`` as overlayfs stacks it: a whiteout (a 0:0
    character device) removes the entry below it, an opaque directory hides what was below."""
    with os.scandir(src) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if _opaque(entry.path) or os.path.islink(target) or not os.path.isdir(target):
                    _remove(target)
                    os.mkdir(target)
                _merge(entry.path, target)
                shutil.copystat(entry.path, target, follow_symlinks=False)
                continue
            _remove(target)
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                continue  # a whiteout: the entry below is gone
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(entry.path), target)
            elif stat.S_ISREG(info.st_mode):
                shutil.copy2(entry.path, target, follow_symlinks=False)
            else:
                raise SandboxConfigError(
                    f"the scratch backend copies files, directories and symlinks; {entry.path} "
                    "is a device, a fifo or a socket"
                )


def _opaque(path: str) -> bool:
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
    return False


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True
