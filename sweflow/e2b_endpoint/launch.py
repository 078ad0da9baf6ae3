"""Run ``sweflow sandbox serve-e2b`` as a child process for a while (tests, benchmarks).

The endpoint gets a free loopback port and its own process group, the e2b SDK's settings point
at it meanwhile, and it is stopped by its PID: Ctrl-C first (it closes every sandbox), SIGKILL to
its group if that hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from sweflow.ports import free_port
from sweflow.sandbox.errors import SandboxStartError

START_TIMEOUT_S = 60.0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/sandboxes", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def start_endpoint(
    base: Path | str, log: Path, layer_roots: Sequence[Path] = ()
) -> tuple[subprocess.Popen, str]:
    """Start the endpoint (``base``: what the `base` template opens; templates built with the
    SDK kept beside ``log``); (process, its URL)."""
    port = free_port()
    argv = [sys.executable, "-m", "sweflow.cli", "sandbox", "serve-e2b", "--port", str(port),
            "--base", str(base), "--templates", str(log.parent / "templates")]  # fmt: skip
    for root in layer_roots:
        argv += ["--layers-from", str(root)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_endpoint(proc)
            raise SandboxStartError(f"serve-e2b did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, url


def stop_endpoint(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def sdk_settings(url: str) -> Iterator[None]:
    """The e2b SDK's settings pointed at ``url`` meanwhile (any API key: it is not checked)."""
    with scoped_environ({"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": "local"}):
        yield


@contextlib.contextmanager
def scoped_environ(wanted: dict[str, str]) -> Iterator[None]:
    """These environment variables meanwhile; the earlier values (or none) afterwards."""
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def local_endpoint(base: Path | str, log: Path, layer_roots: Sequence[Path] = ()) -> Iterator[str]:
    """An endpoint for the duration, the SDK pointed at it; yields its URL."""
    proc, url = start_endpoint(base, log, layer_roots)
    try:
        with sdk_settings(url):
            yield url
    finally:
        stop_endpoint(proc)
