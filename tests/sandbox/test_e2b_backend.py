"""The e2b backend's own behaviour, through sweflow's E2B endpoint (the contract suite, in
tests/sandbox/test_sandbox_contract.py, checks exec, files, diff, timeouts and asyncio on it as
on the other backends). What needs E2B's cloud (its template builder, its control plane) is not run
here: the endpoint builds templates itself, from the same SDK calls."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest

e2b = pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'sweflow[e2b]')")

from sweflow.errors import is_infrastructure  # noqa: E402
from sweflow.sandbox import SandboxConfigError, SandboxCrashError, SandboxStartError  # noqa: E402
from sweflow.sandbox.e2b import E2BSandbox  # noqa: E402
from sweflow.sandbox.e2b.backend import OWNER_KEY  # noqa: E402
from sweflow.sandbox.e2b.environment import (  # noqa: E402
    BASE_TEMPLATE_VAR,
    ENVIRONMENT_VAR,
    environment_for,
)
from sweflow.sandbox.procs import owner_id  # noqa: E402
from sweflow.sandbox.spec import SandboxSpec  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def spec(bookworm_rootfs: Path, e2b_endpoint) -> SandboxSpec:
    return SandboxSpec(layers=[bookworm_rootfs], workdir="/tmp")


def test_the_environment_is_the_specs_template_its_layers_or_a_base_and_the_rest(
    bookworm_rootfs: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv(BASE_TEMPLATE_VAR, raising=False)
    assert environment_for(SandboxSpec(layers=[bookworm_rootfs], template="swe-django")) is None
    spec = SandboxSpec(layers=[bookworm_rootfs, tmp_path])
    assert environment_for(spec).base == f"layers:{bookworm_rootfs}:{tmp_path}"
    monkeypatch.setenv(BASE_TEMPLATE_VAR, "python-base")
    env = environment_for(spec)
    assert (env.mode, env.base, env.layers) == ("template", "python-base", (tmp_path,))
    monkeypatch.setenv(ENVIRONMENT_VAR, "upload")
    assert environment_for(spec).mode == "upload"
    monkeypatch.setenv(ENVIRONMENT_VAR, "copy")
    with pytest.raises(SandboxConfigError, match=f"{ENVIRONMENT_VAR} must be template or upload"):
        environment_for(spec)


def _env_layer(root: Path) -> Path:
    """A layer that adds a file, deletes one (a whiteout) and hides a directory's content."""
    layer = root / "env-layer"
    (layer / "opt/env").mkdir(parents=True)
    (layer / "opt/env/hello.txt").write_text("from the layer\n")
    (layer / "etc/skel").mkdir(parents=True)
    (layer / "etc/skel/only.txt").write_text("alone\n")
    os.setxattr(layer / "etc/skel", "trusted.overlay.opaque", b"y")
    os.mknod(layer / "etc/motd", 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    return layer


@pytest.mark.parametrize("mode", ["template", "upload"])
def test_a_stack_reaches_the_cloud_from_a_base_template(
    mode: str, spec: SandboxSpec, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv(BASE_TEMPLATE_VAR, "base")  # the endpoint's base: the bookworm rootfs
    monkeypatch.setenv(ENVIRONMENT_VAR, mode)
    stacked = spec.model_copy(update={"layers": [*spec.layers, _env_layer(tmp_path)]})
    for _ in range(2):  # the second open of template mode starts from the built template
        sandbox = E2BSandbox(stacked)
        try:
            seen = sandbox.exec(
                "cat /opt/env/hello.txt; ls -A /etc/skel; ls /etc/motd; ls -A /var/tmp"
            )
            assert seen.output.splitlines()[:2] == ["from the layer", "only.txt"]
            assert "No such file" in seen.output and ".sweflow-env" not in seen.output
            if mode == "template":  # the template asked for the spec's memory
                memory_mb = sandbox.sandbox.get_info().memory_mb
                assert memory_mb == stacked.limits.memory_bytes >> 20
        finally:
            sandbox.close()
    if mode == "template":
        assert e2b.Template.exists(environment_for(stacked).template_name)


def test_what_a_cloud_cannot_do_is_refused(spec: SandboxSpec, tmp_path: Path) -> None:
    with pytest.raises(SandboxConfigError, match="upper='disk'"):
        E2BSandbox(spec.model_copy(update={"upper": "disk", "upper_dir": tmp_path / "up"}))
    with pytest.raises(SandboxConfigError, match="host's /"):
        E2BSandbox(spec.model_copy(update={"layers": [Path("/")]}))


def test_the_key_is_sent_and_without_one_nothing_is_asked(
    spec: SandboxSpec, e2b_endpoint, monkeypatch
) -> None:
    monkeypatch.setenv("E2B_API_KEY", e2b_endpoint.key[::-1])
    with pytest.raises(SandboxStartError, match="401"):
        E2BSandbox(spec)
    monkeypatch.delenv("E2B_API_KEY")
    with pytest.raises(SandboxConfigError, match="E2B_API_KEY is unset.*serve-e2b"):
        E2BSandbox(spec)


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


def test_gc_kills_the_sandboxes_of_owners_that_are_gone(e2b_endpoint) -> None:
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
