"""The e2b backend: a sandbox in E2B, Tencent AgentSandbox, or sweflow's own E2B endpoint.

Same protocol and terminal semantics as ``local`` and ``docker``: the supervised persistent
shell of ``sweflow.sandbox.supervised`` runs as a background command of the cloud sandbox, fed
through envd's stdin and read from its output stream, so cd, exports, functions and background
jobs persist; a timeout runs the kill script as a second command; output is capped here.

Where. The e2b SDK's settings: ``E2B_API_KEY`` and ``E2B_DOMAIN`` (Tencent AgentSandbox:
``<region>.tencentags.com``), or ``E2B_API_URL`` plus ``E2B_SANDBOX_URL`` for an endpoint such as
``sweflow sandbox serve-e2b`` (``E2B_API_KEY`` then the key it printed). The template is
``spec.template``; without one, the spec's layers reach the cloud as :mod:`.environment` says (a
template built per layer stack, an upload at every open, or the layer directories themselves for
sweflow's own endpoint).

Limits. The cloud sets CPU and memory per template: a template built for a layer stack asks for
the spec's ``cpus`` (rounded up) and ``memory_bytes``; a given template (``spec.template``, the
base template of ``upload`` mode) has its own. ``pids``, ``tmp_bytes`` and ``upper_bytes`` are the
cloud's. ``wall_time_s`` and ``output_bytes`` are enforced here. ``upper='disk'``, binds and the
host's / are refused. ``network`` maps to the sandbox's internet access.

Faults. A cloud sandbox that expires or is killed, or a connection that cannot be restored,
raises SandboxCrashError (an infrastructure error: the RL reward path retries it, never scores 0).
"""

from __future__ import annotations

import os
import queue
import shlex
import threading
import time
import uuid
from typing import Any

from sweflow.sandbox.base import require_absolute, require_file_path
from sweflow.sandbox.e2b.environment import (
    Environment,
    ensure_template,
    environment_for,
    upload_environment,
)
from sweflow.sandbox.errors import (
    SandboxConfigError,
    SandboxCrashError,
    SandboxFileError,
    SandboxStartError,
)
from sweflow.sandbox.leases import hold_leases
from sweflow.sandbox.procs import owner_id, owner_is_gone
from sweflow.sandbox.shell import SHELL_ENV
from sweflow.sandbox.spec import SandboxSpec
from sweflow.sandbox.supervised import (
    SUPERVISOR,
    SUPERVISOR_ARGV,
    ExitScanner,
    StreamEnded,
    SupervisedShell,
)

LIFETIME_S = 3600  # the cloud sandbox's timeout, renewed while it is used
RENEW_BELOW_S = 600
BESIDE_TIMEOUT_S = 60
OWNER_KEY = "sweflow-owner"
_ENDED = b"\0sweflow-stream-ended"


def _sdk():
    try:
        import e2b
    except ImportError as exc:
        raise SandboxConfigError(
            "the e2b backend needs the e2b SDK: pip install 'sweflow[e2b]'"
        ) from exc
    return e2b


class E2BSandbox(SupervisedShell):
    """A sandbox in an E2B-compatible cloud, driven through the e2b SDK."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.id = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()  # one command at a time on the shell's stream
        self._closed = False
        self._chunks: queue.Queue[bytes] = queue.Queue()
        self._nonce = os.urandom(8).hex()
        self._supervisor: Any = None
        self.sandbox: Any = None
        self._check_spec()
        self._leases = hold_leases(spec.leases)  # the layers stay while a template reads them
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        spec = self.spec
        env = environment_for(spec)
        self._e2b = _sdk()
        if not os.environ.get("E2B_API_KEY"):
            raise SandboxConfigError(
                "E2B_API_KEY is unset: the e2b backend sends the cloud's API key, or the key "
                "`sweflow sandbox serve-e2b` printed"
            )
        if env is None:
            template = spec.template or ""
        else:
            template = ensure_template(self._e2b, env) if env.mode == "template" else env.base
        try:
            self.sandbox = self._e2b.Sandbox.create(
                template,
                timeout=LIFETIME_S,
                metadata={OWNER_KEY: owner_id()},
                allow_internet_access=spec.network,
            )
        except Exception as exc:
            raise SandboxStartError(
                f"e2b could not create a sandbox from {template}: {exc}"
            ) from exc
        self._renew_at = time.monotonic() + LIFETIME_S - RENEW_BELOW_S
        if env is not None and env.mode == "upload":
            self._upload(env)
        self._start_supervisor()

    @classmethod
    def collect_garbage(cls) -> dict[str, int]:
        """Kill the cloud sandboxes whose owning process (on this host) is gone."""
        if not (os.environ.get("E2B_API_KEY") or os.environ.get("E2B_API_URL")):
            raise SandboxStartError("E2B is not configured (E2B_API_KEY and E2B_API_URL unset)")
        try:
            e2b = _sdk()
        except SandboxConfigError as exc:
            raise SandboxStartError(str(exc)) from None
        try:
            listed = e2b.Sandbox.list().next_items()
        except Exception as exc:
            raise SandboxStartError(f"the e2b API does not answer: {exc}") from exc
        killed = 0
        for info in listed:
            owner = (info.metadata or {}).get(OWNER_KEY)
            if owner is not None and owner_is_gone(owner):
                killed += bool(e2b.Sandbox.kill(info.sandbox_id))
        return {"cloud sandboxes killed": killed}

    def _check_spec(self) -> None:
        spec = self.spec
        if spec.upper == "disk":
            raise SandboxConfigError("spec.upper='disk' is not supported by the e2b backend")
        if spec.binds:
            raise SandboxConfigError("binds are not supported by the e2b backend")

    def _upload(self, env: Environment) -> None:
        try:
            upload_environment(self.sandbox, env)
        except Exception as exc:
            raise SandboxStartError(
                f"sandbox {self.id}: its environment could not be uploaded: {exc}"
            ) from exc

    # -- the supervisor's stream ---------------------------------------------------------------
    def _start_supervisor(self) -> None:
        """Start the supervisor as a background command and pump its output into the queue."""
        env = {
            **self.spec.shell_env(),
            **SHELL_ENV,
            "__SF_SUPERVISOR": SUPERVISOR,
            "__SF_NONCE": self._nonce,
        }
        # the SDK starts `bash -l`, whose profile may reset PATH: put the spec's back, then exec
        start = f"export PATH={shlex.quote(env['PATH'])}; exec {shlex.join(SUPERVISOR_ARGV)}"
        self._chunks = queue.Queue()
        self._exits = ExitScanner(self._nonce)
        try:
            handle = self.sandbox.commands.run(
                start,
                background=True,
                stdin=True,
                envs=env,
                cwd=self.spec.workdir,
                timeout=0,
                retain_output=False,
            )
        except Exception as exc:
            raise SandboxStartError(f"sandbox {self.id}: its shell did not start: {exc}") from exc
        self._supervisor = handle
        self.supervisor_pid = str(handle.pid)
        chunks = self._chunks

        def pump() -> None:
            def put(text: str) -> None:
                chunks.put(text.encode("utf-8", "surrogateescape"))

            try:
                handle.wait(on_stdout=put, on_stderr=put)
            except Exception:  # noqa: BLE001 - the stream ended: the reader is told below
                pass
            chunks.put(_ENDED)

        threading.Thread(target=pump, name=f"e2b-{self.id}", daemon=True).start()

    def _read(self, deadline: float | None) -> bytes | None:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            first = self._chunks.get(timeout=wait)
        except queue.Empty:
            return None
        data = [first]
        while data[-1] != _ENDED:
            try:
                data.append(self._chunks.get_nowait())
            except queue.Empty:
                break
        if data[-1] == _ENDED:
            self._chunks.put(_ENDED)  # every later read sees the end too
            if len(data) == 1:
                raise StreamEnded
            data.pop()
        return b"".join(data)

    def _send(self, payload: bytes) -> None:
        try:
            self.sandbox.commands.send_stdin(self._supervisor.pid, payload)
        except Exception as exc:
            self._check_open()
            raise SandboxCrashError(f"sandbox {self.id}: cannot write to its shell: {exc}") from exc

    def _restart(self) -> int:
        """The supervisor's stream ended: a sandbox that is gone is a crash; else start it again."""
        try:
            alive = self.sandbox.is_running()
        except Exception:  # noqa: BLE001 - unreachable counts as gone
            alive = False
        if not alive:
            raise SandboxCrashError(
                f"sandbox {self.id}: the e2b sandbox {self.sandbox.sandbox_id} ended (killed, or "
                "past its timeout)"
            )
        self._start_supervisor()
        return 137

    def _run_beside(self, argv: list[str]) -> tuple[int, bytes]:
        try:
            result = self.sandbox.commands.run(shlex.join(argv), timeout=BESIDE_TIMEOUT_S)
        except self._e2b.CommandExitException as exc:
            return exc.exit_code, (exc.stdout or "").encode()
        except Exception as exc:
            raise SandboxCrashError(
                f"sandbox {self.id}: a command beside the shell failed: {exc}"
            ) from exc
        return result.exit_code, (result.stdout or "").encode()

    def _kill_all(self) -> None:
        """Kill the supervisor and what it started; its stream ends and _restart brings it back."""
        try:
            self.sandbox.commands.kill(self._supervisor.pid)
        except Exception as exc:
            self._check_open()
            raise SandboxCrashError(f"sandbox {self.id}: cannot kill its shell: {exc}") from exc

    # -- the protocol ---------------------------------------------------------------------------
    def _before_exec(self) -> None:
        """Push the cloud sandbox's timeout back while it is in use."""
        if time.monotonic() < self._renew_at:
            return
        try:
            self.sandbox.set_timeout(LIFETIME_S)
        except Exception as exc:
            self._check_open()
            raise SandboxCrashError(f"sandbox {self.id}: cannot renew its timeout: {exc}") from exc
        self._renew_at = time.monotonic() + LIFETIME_S - RENEW_BELOW_S

    def read(self, path: str) -> bytes:
        self._check_open()
        require_absolute(path)
        try:
            return bytes(self.sandbox.files.read(path, format="bytes"))
        except Exception as exc:
            raise self._file_error("read", path, exc) from exc

    def write(self, path: str, data: bytes | str) -> None:
        self._check_open()
        require_file_path(path)
        try:
            self.sandbox.files.write(path, data.encode() if isinstance(data, str) else bytes(data))
        except Exception as exc:
            raise self._file_error("write", path, exc) from exc

    def _file_error(self, what: str, path: str, exc: Exception) -> Exception:
        """A missing or unusable path is the caller's (SandboxFileError); the rest a crash."""
        self._check_open()
        e2b = self._e2b
        if isinstance(exc, (e2b.NotFoundException, e2b.InvalidArgumentException)):
            return SandboxFileError(f"cannot {what} {path} in the sandbox: {exc}")
        return SandboxCrashError(f"sandbox {self.id}: {what} {path} failed: {exc}")

    def close(self) -> None:
        """Kill the cloud sandbox; an exec running in another thread gets a SandboxCrashError."""
        if self._closed:
            return
        self._closed = True
        self._chunks.put(_ENDED)  # wakes an exec() waiting on the stream
        if self.sandbox is not None:
            try:
                self.sandbox.kill()
            except Exception:  # noqa: BLE001 - gone already; gc finds what a failure leaves
                pass
        self._leases.release()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxCrashError(f"sandbox {self.id} is closed")
