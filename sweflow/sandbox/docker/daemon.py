"""A docker daemon for the docker backend, its benchmark and its tests.

Uses the daemon at DOCKER_HOST (or the default socket) when one answers; otherwise starts a
private ``dockerd`` (no bridge, no iptables changes) with its own socket and a cached data root,
and stops it, and the containerd it started, by PID when done.

A daemon outlives a process killed without its cleanup (SIGKILL, SIGTERM to a test run): it
runs in a session of its own. Its PID and start time are written beside the data root, so the
next start on that root, which finds no live owner holding the root's lock, stops it first
(a daemon still on the root would keep containerd's database locked, and the new one would not
start).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from sweflow.paths import cache_root
from sweflow.sandbox.errors import SandboxConfigError, SandboxStartError
from sweflow.sandbox.procs import children_of, running, start_ticks, stop_pid

START_TIMEOUT_S = 60.0


def daemon_answers(host: str | None) -> bool:
    import docker

    try:
        client = docker.DockerClient(base_url=host) if host else docker.from_env()
    except Exception:
        return False
    try:
        client.ping()
        return True
    except Exception:
        return False
    finally:
        client.close()


def _data_root(stack: ExitStack, preferred: Path) -> Path:
    """The cached data root, or a throwaway one while another process's daemon holds it."""
    preferred.mkdir(parents=True, exist_ok=True)
    lock = stack.enter_context(open(preferred.parent / f"{preferred.name}.lock", "w"))
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return preferred
    except BlockingIOError:
        throwaway = Path(tempfile.mkdtemp(prefix="sweflow-docker-data-"))
        stack.callback(shutil.rmtree, throwaway, ignore_errors=True)
        return throwaway


@contextmanager
def docker_daemon(data_root: Path | None = None) -> Iterator[str]:
    """Yield a DOCKER_HOST that answers, starting (and afterwards stopping) dockerd if needed."""
    existing = os.environ.get("DOCKER_HOST")
    if daemon_answers(existing):
        yield existing or "unix:///var/run/docker.sock"
        return
    exe = shutil.which("dockerd") or next(
        (p for p in ("/usr/sbin/dockerd", "/usr/bin/dockerd") if Path(p).exists()), None
    )
    if exe is None:
        raise SandboxConfigError(
            "no docker daemon answers and dockerd is not installed (apt-get install docker.io)"
        )
    if os.geteuid() != 0:
        raise SandboxConfigError("no docker daemon answers, and starting dockerd needs root")
    with ExitStack() as stack:
        preferred_root = data_root or cache_root() / "docker"
        data = _data_root(stack, preferred_root)
        if data == preferred_root:
            _stop_orphan(data)
        run_dir = Path(tempfile.mkdtemp(prefix="sfdockerd-"))  # short: socket paths are limited
        stack.callback(shutil.rmtree, run_dir, ignore_errors=True)
        host = f"unix://{run_dir / 'docker.sock'}"
        log_path = run_dir / "dockerd.log"
        argv = [
            exe,
            "--host",
            host,
            "--data-root",
            str(data),
            "--exec-root",
            str(run_dir / "exec"),
            "--pidfile",
            str(run_dir / "dockerd.pid"),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            # an init as PID 1 passes SIGTERM on: a `tail -f /dev/null` container (swebench's
            # harness runs them) stops at once instead of after `docker stop`'s whole grace time
            "--init",
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if data == preferred_root:
            _record_daemon(stack, data, proc.pid, run_dir)  # removed after the stop below
        stack.callback(_stop_daemon, proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not daemon_answers(host):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise SandboxStartError(
                    f"dockerd did not start (exit {proc.poll()}); its log ends:\n{tail}"
                )
            time.sleep(0.25)
        os.environ["DOCKER_HOST"] = host
        stack.callback(_restore_env, existing)
        yield host


def _daemon_file(data: Path) -> Path:
    return data.parent / f"{data.name}.daemon"


def _stop_orphan(data: Path) -> None:
    """Stop the daemon (and its containerd) a dead owner left on ``data``, by its recorded PID
    and start time: a PID reused by another process since is left alone."""
    record = _daemon_file(data)
    try:
        pid_text, started_text, run_dir = record.read_text().split("\n")[0].split(" ", 2)
        pid, started = int(pid_text), int(started_text)
    except (FileNotFoundError, ValueError):
        return
    if running(pid, started):
        children = children_of(pid)
        stop_pid(pid, grace_s=10.0, started=started)
        for child, child_started in children:
            stop_pid(child, grace_s=5.0, started=child_started)
    shutil.rmtree(run_dir, ignore_errors=True)  # its socket, exec root and log
    record.unlink(missing_ok=True)


def _record_daemon(stack: ExitStack, data: Path, pid: int, run_dir: Path) -> None:
    """Write who runs on ``data`` (until it is stopped), for :func:`_stop_orphan`."""
    record = _daemon_file(data)
    record.write_text(f"{pid} {start_ticks(pid)} {run_dir}\n")
    stack.callback(record.unlink, missing_ok=True)


def _restore_env(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = previous


def _stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    children = children_of(proc.pid)
    stop_pid(proc.pid)
    proc.wait()
    for pid, started in children:
        if running(pid, started):
            stop_pid(pid, grace_s=5.0, started=started)
