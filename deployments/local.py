"""A local Prefect stack for sweflow: server, process work pool, deployments and a worker.

``python deployments/local.py up`` starts what is not running (PIDs in ``<state>/*.pid``),
``run NAME`` runs a deployment and watches it, ``down`` stops what ``up`` started, by PID.
The test suite uses the same :class:`LocalPrefect` with its own state folder and port.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

try:
    from deployments.stage_lines import watch
except ModuleNotFoundError:  # run as a script, or loaded by path (`sweflow bench pipeline`)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stage_lines import watch

ROOT = Path(__file__).resolve().parent.parent
POOL = "sweflow"
SANDBOX_LIMIT = "sweflow-sandboxes"


@dataclass
class LocalPrefect:
    state: Path  # PREFECT_HOME, logs and PID files
    port: int = 4200
    root: Path = ROOT
    sandbox_limit: int = 8

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PREFECT_HOME": str(self.state / "home"),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_EXTRA_LOGGERS": "sweflow",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
            # a run submitted from the UI or the CLI starts within a second, not within 10
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PYTHONPATH": str(self.root),
            "SWEFLOW_ROOT": str(self.root),
        }

    # -- processes ---------------------------------------------------------------------------
    def up(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        if not self.healthy():
            self._spawn(
                "server",
                ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
            )
            self.wait_healthy()
        self.prefect("work-pool", "create", POOL, "--type", "process", check=False)
        self.prefect(
            "global-concurrency-limit",
            "create",
            SANDBOX_LIMIT,
            "--limit",
            str(self.sandbox_limit),
            check=False,
        )
        self.deploy()
        if not self._alive("worker"):
            self._spawn("worker", ["prefect", "worker", "start", "--pool", POOL])

    def deploy(self) -> None:
        self.prefect(
            "--no-prompt",
            "deploy",
            "--all",
            "--prefect-file",
            str(self.root / "deployments" / "prefect.yaml"),
        )

    def down(self) -> None:
        for name in ("worker", "server"):
            pid = self._pid(name)
            if pid is not None and _running(pid):
                os.killpg(pid, signal.SIGTERM)
                _wait_gone(pid, 20) or os.killpg(pid, signal.SIGKILL)
            (self.state / f"{name}.pid").unlink(missing_ok=True)

    def run(self, deployment: str, *params: str, timeout: float = 3600, out=print):
        """``prefect deployment run NAME``, then one line per stage as it starts and ends, to
        ``out`` (the events stay in the UI): (exit code, flow run id). The exit code is 0 when
        the flow run completed, 1 otherwise (as ``--watch``'s)."""
        done = self.prefect("deployment", "run", deployment, *params, check=False)
        found = re.search(r"UUID: ([0-9a-f-]{36})", done.stdout or "")
        if done.returncode != 0 or not found:
            out(f"prefect deployment run {deployment} failed:\n{done.stdout}\n{done.stderr}")
            return done.returncode or 1, None
        out(f"flow run {found[1]} (its events: {self.ui_url}/runs/flow-run/{found[1]})")
        state = watch(self.api, found[1], out, deadline=time.monotonic() + timeout)
        out(f"flow run {state}")
        return (0 if state == "Completed" else 1), found[1]

    def api(self, path: str, body: dict | None = None) -> object:
        """A call to the server's REST API (POST with a JSON body, else GET)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.api_url}/{path}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def since_submit(self, flow_run_id: str, moment: str = "start_time") -> float:
        """Seconds from a flow run's creation (the submit) to its ``start_time`` (Running) or
        ``end_time`` (final), as the server recorded them: what a user of the UI waits."""
        run = self.api(f"flow_runs/{flow_run_id}")
        created, then = (datetime.fromisoformat(run[k]) for k in ("created", moment))  # type: ignore[index]
        return (then - created).total_seconds()

    def wait(self, flow_run_id: str, timeout: float = 1800) -> str:
        """Poll a flow run until it is final; its state name ("Completed", "Failed"...)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.api(f"flow_runs/{flow_run_id}")["state"]  # type: ignore[index]
            if state["type"] in ("COMPLETED", "FAILED", "CANCELLED", "CRASHED"):
                return state["name"]
            time.sleep(1.0)
        raise TimeoutError(f"flow run {flow_run_id} not final after {timeout:.0f} s")

    def task_states(self, flow_run_id: str) -> dict[str, str]:
        """{task name: state name} of a flow run's latest task runs ("Cached", "Completed"...)."""
        runs = self.api("task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
        latest: dict[str, dict] = {}
        for run in sorted(runs, key=lambda r: r["expected_start_time"] or ""):  # type: ignore[union-attr]
            latest[run["name"].split(" [")[0]] = run
        return {name: run["state"]["name"] for name, run in latest.items()}

    def prefect(self, *args: str, check: bool = True, timeout: float = 300, capture: bool = True):
        done = subprocess.run(
            ["prefect", *args],
            cwd=self.root,
            env=self.env(),
            capture_output=capture,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            if not self._alive("server"):
                log = (self.state / "server.log").read_text()[-2000:]
                raise RuntimeError(f"prefect server exited:\n{log}")
            time.sleep(0.5)
        raise RuntimeError(f"prefect server not healthy after {timeout:.0f} s")

    def _spawn(self, name: str, argv: list[str]) -> int:
        log = open(self.state / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(
            argv,
            cwd=self.root,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: down() stops its children too
        )
        (self.state / f"{name}.pid").write_text(str(proc.pid))
        return proc.pid

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.state / f"{name}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, name: str) -> bool:
        pid = self._pid(name)
        return pid is not None and _running(pid)


def _running(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our exited child
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.2)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "run", "down"])
    parser.add_argument("deployment", nargs="?", default="end-to-end/demo")
    parser.add_argument("--state", type=Path, default=ROOT / "runs" / "prefect")
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--params", help="run: the flow's parameters as JSON")
    args = parser.parse_args()
    stack = LocalPrefect(args.state, args.port)
    if args.command == "up":
        stack.up()
        print(f"Prefect UI: {stack.ui_url}   (state and logs: {args.state})")
        return 0
    if args.command == "down":
        stack.down()
        return 0
    params = ("--params", args.params) if args.params else ()
    return stack.run(args.deployment, *params)[0]


if __name__ == "__main__":
    sys.exit(main())
