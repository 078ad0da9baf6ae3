"""The e2b backend's own behaviour, through sweflow's E2B endpoint (the contract suite, in
tests/test_sandbox_contract.py, checks exec, files, diff, timeouts and asyncio on it as on the
other backends). What needs E2B's cloud (template builds, its control plane) is not run here."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

e2b = pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'sweflow[e2b]')")

from sweflow.errors import is_infrastructure  # noqa: E402
from sweflow.sandbox import SandboxConfigError, SandboxCrashError, SandboxStartError  # noqa: E402
from sweflow.sandbox.e2b import E2BSandbox  # noqa: E402
from sweflow.sandbox.e2b.backend import OWNER_KEY, template_for  # noqa: E402
from sweflow.sandbox.procs import owner_id  # noqa: E402
from sweflow.sandbox.spec import SandboxSpec  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def spec(bookworm_rootfs: Path, e2b_endpoint: str) -> SandboxSpec:
    return SandboxSpec(layers=[bookworm_rootfs], workdir="/tmp")


def test_the_template_is_the_specs_or_its_layers(bookworm_rootfs: Path) -> None:
    assert (
        template_for(SandboxSpec(layers=[bookworm_rootfs], template="swe-django")) == "swe-django"
    )
    assert template_for(SandboxSpec(layers=[bookworm_rootfs])) == f"layers:{bookworm_rootfs}"


def test_what_a_cloud_cannot_do_is_refused(spec: SandboxSpec, tmp_path: Path) -> None:
    with pytest.raises(SandboxConfigError, match="upper='disk'"):
        E2BSandbox(spec.model_copy(update={"upper": "disk", "upper_dir": tmp_path / "up"}))
    with pytest.raises(SandboxConfigError, match="host's /"):
        E2BSandbox(spec.model_copy(update={"layers": [Path("/")]}))


def test_layers_outside_the_endpoints_roots_are_refused(spec: SandboxSpec) -> None:
    with pytest.raises(SandboxStartError, match="--layers-from"):
        E2BSandbox(spec.model_copy(update={"layers": [Path("/etc")]}))


def test_a_sandbox_killed_under_it_is_an_infrastructure_failure(spec: SandboxSpec) -> None:
    sandbox = E2BSandbox(spec)
    try:
        assert sandbox.exec("echo up").output == "up\n"
        e2b.Sandbox.kill(sandbox.sandbox.sandbox_id)  # as an expiry or the cloud would
        with pytest.raises(SandboxCrashError) as crashed:
            sandbox.exec("echo again")
        assert is_infrastructure(crashed.value)  # retried as infrastructure, never a 0 reward
    finally:
        sandbox.close()


def test_the_cloud_timeout_is_renewed_while_in_use(spec: SandboxSpec, monkeypatch) -> None:
    import sweflow.sandbox.e2b.backend as backend

    monkeypatch.setattr(backend, "LIFETIME_S", 3)
    monkeypatch.setattr(backend, "RENEW_BELOW_S", 2)
    sandbox = E2BSandbox(spec)
    try:
        for _ in range(5):  # 5 s of use against a 3 s lifetime
            assert sandbox.exec("sleep 1; echo on").output == "on\n"
    finally:
        sandbox.close()


def test_gc_kills_the_sandboxes_of_owners_that_are_gone(e2b_endpoint: str) -> None:
    dead = f"{socket.gethostname()}:{2**22 + 7}:1"  # no such pid
    orphan = e2b.Sandbox.create(timeout=60, metadata={OWNER_KEY: dead})
    mine = e2b.Sandbox.create(timeout=60, metadata={OWNER_KEY: owner_id()})
    other_host = e2b.Sandbox.create(timeout=60, metadata={OWNER_KEY: "elsewhere:1:1"})
    try:
        assert E2BSandbox.collect_garbage() == {"cloud sandboxes killed": 1}
        assert not orphan.is_running()
        assert mine.is_running() and other_host.is_running()
    finally:
        for sandbox in (mine, other_host):
            sandbox.kill()


def test_gc_without_e2b_configured_is_skipped_not_sent_anywhere(monkeypatch) -> None:
    for key in ("E2B_API_KEY", "E2B_API_URL"):
        monkeypatch.delenv(key, raising=False)
    started = time.monotonic()
    with pytest.raises(SandboxStartError, match="not configured"):
        E2BSandbox.collect_garbage()
    assert time.monotonic() - started < 1
    assert "E2B_API_URL" not in os.environ
