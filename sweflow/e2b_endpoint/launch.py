"""Run ``sweflow sandbox serve-e2b`` as a child process for a while (tests, benchmarks).

The endpoint gets a free loopback port, a new API key (handed over in its environment, never on
its command line) and its own process group; the e2b SDK's settings point at it meanwhile, and
it is stopped by its PID: Ctrl-C first (it closes every sandbox), SIGKILL to its group if that
hangs.
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
from dataclasses import dataclass
from pathlib import Path

from sweflow.e2b_endpoint.auth import KEY_ENV, new_secret
from sweflow.ports import free_port
from sweflow.sandbox.errors import SandboxStartError

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Endpoint:
    """A started endpoint: its process, its URL and the API key it takes."""

    proc: subprocess.Popen
    url: str
    key: str


def _answers(url: str, key: str) -> bool:
    request = urllib.request.Request(f"{url}/v2/sandboxes", headers={"X-API-KEY": key})
    try:
        with urllib.request.urlopen(request, timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def start_endpoint(
    base: Path | str, log: Path, layer_roots: Sequence[Path] = (), extra: Sequence[str] = ()
) -> Endpoint:
    """Start the endpoint (``base``: what the `base` template opens; templates built with the
    SDK kept beside ``log``; ``extra``: more serve-e2b options)."""
    port = free_port()
    argv = [sys.executable, "-m", "sweflow.cli", "sandbox", "serve-e2b", "--port", str(port)]
    argv += ["--base", str(base), "--templates", str(log.parent / "templates"), *extra]
    for root in layer_roots:
        argv += ["--layers-from", str(root)]
    key = new_secret()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, KEY_ENV: key},
        )
    endpoint = Endpoint(proc, f"http://127.0.0.1:{port}", key)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(endpoint.url, key):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_endpoint(proc)
            raise SandboxStartError(f"serve-e2b did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return endpoint


def stop_endpoint(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def sdk_settings(endpoint: Endpoint) -> Iterator[None]:
    """The e2b SDK's settings pointed at ``endpoint``, with its key, meanwhile."""
    url = endpoint.url
    with scoped_environ({"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": endpoint.key}):
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
def local_endpoint(
    base: Path | str, log: Path, layer_roots: Sequence[Path] = (), extra: Sequence[str] = ()
) -> Iterator[Endpoint]:
    """An endpoint for the duration, the SDK pointed at it."""
    endpoint = start_endpoint(base, log, layer_roots, extra)
    try:
        with sdk_settings(endpoint):
            yield endpoint
    finally:
        stop_endpoint(endpoint.proc)
