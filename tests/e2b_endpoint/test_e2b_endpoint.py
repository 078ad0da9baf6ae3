"""`sweflow sandbox serve-e2b` driven by the real e2b SDK, as code written for E2B would drive it.

The endpoint runs as its own process (started here, stopped by its PID) on a loopback port, its
sandboxes local ones on the bookworm rootfs; the SDK finds it through E2B_API_URL and
E2B_SANDBOX_URL. What needs E2B's cloud (its template builder, the real control plane) is not
run: template builds here are the endpoint's own, over layer directories.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

e2b = pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'sweflow[e2b]')")
from e2b import (  # noqa: E402
    AsyncSandbox,
    BuildException,
    CommandExitException,
    NotFoundException,
    Sandbox,
    SandboxException,
    Template,
)

from sweflow.e2b_endpoint.launch import Endpoint, start_endpoint, stop_endpoint  # noqa: E402
from sweflow.sandbox.local.state import state_dir  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def endpoint(e2b_endpoint: Endpoint) -> Endpoint:
    return e2b_endpoint


@pytest.fixture
def sbx(endpoint):
    sandbox = Sandbox.create(timeout=120)
    yield sandbox
    try:
        sandbox.kill()
    except SandboxException:
        pass


# -- control API ----------------------------------------------------------------------------------
def test_lifecycle_list_metadata_timeout_kill(endpoint) -> None:
    first = Sandbox.create(timeout=60, metadata={"run": "a"})
    second = Sandbox.create(timeout=60, metadata={"run": "b"})
    listed = {s.sandbox_id: s for s in Sandbox.list().next_items()}
    assert {first.sandbox_id, second.sandbox_id} <= set(listed)
    assert listed[first.sandbox_id].metadata == {"run": "a"}
    only_b = Sandbox.list(query=e2b.SandboxQuery(metadata={"run": "b"})).next_items()
    assert [s.sandbox_id for s in only_b] == [second.sandbox_id]
    info = first.get_info()
    assert info.template_id == "base" and info.end_at > info.started_at
    first.set_timeout(600)
    assert (first.get_info().end_at - info.end_at).total_seconds() > 500
    again = Sandbox.connect(first.sandbox_id)
    assert again.commands.run("echo same").stdout == "same\n"
    first.kill()
    assert not first.is_running() and second.is_running()
    assert first.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    with pytest.raises(SandboxException, match="was not found"):
        first.commands.run("true")
    second.kill()


def test_an_unknown_template_is_named(endpoint) -> None:
    with pytest.raises(SandboxException, match="404: template 'no-such-template' is none of"):
        Sandbox.create("no-such-template")


def test_a_sandbox_past_its_timeout_is_closed(endpoint) -> None:
    before = set(os.listdir(state_dir())) if state_dir().is_dir() else set()
    sandbox = Sandbox.create(timeout=1)
    assert sandbox.commands.run("echo up").stdout == "up\n"
    time.sleep(3)
    assert not sandbox.is_running()
    assert sandbox.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    after = set(os.listdir(state_dir())) if state_dir().is_dir() else set()
    assert after <= before  # its local sandbox is gone from the host too


# -- commands -------------------------------------------------------------------------------------
def test_run_streams_stdout_and_stderr_apart_with_cwd_env_and_exit_codes(sbx) -> None:
    result = sbx.commands.run(
        "echo out; echo err >&2; pwd; echo $GREETING", cwd="/tmp", envs={"GREETING": "hi there"}
    )
    assert result.stdout == "out\n/tmp\nhi there\n" and result.stderr == "err\n"
    assert result.exit_code == 0
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3 and failed.value.stdout == "partial\n"
    seen: list[tuple[float, str]] = []
    started = time.monotonic()

    def stamp(line: str) -> None:
        seen.append((time.monotonic() - started, line))

    sbx.commands.run("echo first; sleep 1.5; echo second", on_stdout=stamp)
    assert [line for _, line in seen] == ["first\n", "second\n"]
    assert seen[0][0] < 1.0 <= seen[1][0]  # streamed as it came, not at the end


def test_background_command_list_and_kill_take_its_children(sbx) -> None:
    handle = sbx.commands.run("sh -c 'sleep 300 & sleep 301'", background=True)
    time.sleep(0.5)
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    assert "sleep 301" in sbx.commands.run("ps -eo args").stdout
    assert sbx.commands.kill(handle.pid)
    with pytest.raises(CommandExitException):
        handle.wait()
    time.sleep(0.3)
    left = sbx.commands.run("ps -eo args").stdout
    assert "sleep 300" not in left and "sleep 301" not in left
    assert handle.pid not in [p.pid for p in sbx.commands.list()]


def test_stdin_reaches_a_background_command(sbx) -> None:
    handle = sbx.commands.run("head -n 2", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "one\n")
    sbx.commands.send_stdin(handle.pid, "two\nthree\n")
    assert handle.wait().stdout == "one\ntwo\n"


def test_a_disconnected_command_keeps_running_and_can_be_reattached(sbx) -> None:
    handle = sbx.commands.run("sleep 1; echo done-late", background=True)
    handle.disconnect()
    again = sbx.commands.connect(handle.pid)
    assert again.wait().stdout == "done-late\n"


def test_pty_is_refused_with_a_reason(sbx) -> None:
    with pytest.raises(SandboxException, match="PTY"):
        sbx.pty.create(e2b.PtySize(rows=24, cols=80))


# -- files ----------------------------------------------------------------------------------------
def test_files_round_trip_list_stat_move_remove(sbx) -> None:
    blob = bytes(range(256)) * 100
    sbx.files.write("/work/data/blob.bin", blob)
    assert bytes(sbx.files.read("/work/data/blob.bin", format="bytes")) == blob
    sbx.files.write_files(
        [{"path": "/work/a.txt", "data": "A"}, {"path": "/work/b.txt", "data": "B"}]
    )
    assert sbx.commands.run("cat /work/a.txt /work/b.txt").stdout == "AB"
    names = {(e.path, e.type.value) for e in sbx.files.list("/work", depth=2)}
    assert names == {
        ("/work/a.txt", "file"),
        ("/work/b.txt", "file"),
        ("/work/data", "dir"),
        ("/work/data/blob.bin", "file"),
    }
    info = sbx.files.get_info("/work/data/blob.bin")
    assert info.size == len(blob) and info.owner == "root" and info.permissions.startswith("-rw")
    assert sbx.files.make_dir("/work/new/deeper") and not sbx.files.make_dir("/work/new/deeper")
    assert sbx.files.rename("/work/a.txt", "/work/new/a.txt").path == "/work/new/a.txt"
    assert not sbx.files.exists("/work/a.txt") and sbx.files.exists("/work/new/a.txt")
    sbx.files.remove("/work/new")
    assert not sbx.files.exists("/work/new")
    with pytest.raises(NotFoundException):
        sbx.files.read("/work/missing.txt")
    with pytest.raises(SandboxException, match="watchers"):
        sbx.files.watch_dir("/work")


def test_a_symlink_in_the_sandbox_never_reaches_the_host(sbx, tmp_path) -> None:
    marker = f"sweflow-escape-{os.getpid()}"
    sbx.commands.run(f"ln -s / /tmp/up && ln -s /etc/{marker} /tmp/direct")
    sbx.files.write(f"/tmp/up/etc/{marker}", "inside")
    sbx.files.write("/tmp/direct", "inside too")
    assert not Path(f"/etc/{marker}").exists()
    assert sbx.commands.run(f"cat /etc/{marker}").stdout == "inside too"
    # reads resolve as the sandbox's processes see them: its own /etc, never the host's
    inside = sbx.commands.run("cat /etc/hostname /etc/passwd").stdout
    assert sbx.files.read("/tmp/up/etc/hostname") + sbx.files.read("/tmp/up/etc/passwd") == inside
    assert sbx.files.read("/tmp/up/etc/passwd") != Path("/etc/passwd").read_text()


# -- async SDK and shutdown -----------------------------------------------------------------------
def test_async_sdk_runs_sandboxes_concurrently(endpoint) -> None:
    import asyncio

    async def one(i: int) -> tuple[str, float]:
        sandbox = await AsyncSandbox.create(timeout=60)
        try:
            started = time.monotonic()
            result = await sandbox.commands.run(f"sleep 1; echo {i}")
            return result.stdout, time.monotonic() - started
        finally:
            await sandbox.kill()

    async def main():
        started = time.monotonic()
        results = await asyncio.gather(*(one(i) for i in range(3)))
        return results, time.monotonic() - started

    results, elapsed = asyncio.run(main())
    assert [out for out, _ in results] == ["0\n", "1\n", "2\n"]
    assert elapsed < 2.9  # concurrent, not one after the other


def test_ctrl_c_closes_every_sandbox(bookworm_rootfs, tmp_path, monkeypatch) -> None:
    started = start_endpoint(bookworm_rootfs, tmp_path / "endpoint.log")
    proc = started.proc
    try:
        before = set(os.listdir(state_dir())) if state_dir().is_dir() else set()
        monkeypatch.setenv("E2B_API_URL", started.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", started.url)
        monkeypatch.setenv("E2B_API_KEY", started.key)
        sandboxes = [Sandbox.create(timeout=60) for _ in range(2)]
        runner = threading.Thread(
            target=lambda: sandboxes[0].commands.run("sleep 100", background=True), daemon=True
        )
        runner.start()
        time.sleep(0.5)
        assert len(set(os.listdir(state_dir())) - before) == 2
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(15)
        assert time.monotonic() - started < 5
        assert set(os.listdir(state_dir())) <= before
    finally:
        stop_endpoint(proc)


def test_a_template_built_with_the_sdk_opens_with_its_files_env_and_workdir(
    endpoint, tmp_path
) -> None:
    (tmp_path / "tool.sh").write_text("echo tool says $GREETING\n")
    template = (
        Template(file_context_path=tmp_path)
        .from_template("base")
        .copy("tool.sh", "/opt/tools/")
        .set_envs({"GREETING": "hello"})
        .set_workdir("/opt/tools")
        .run_cmd("sh /opt/tools/tool.sh > built.txt && rm /etc/motd")
    )
    logs: list[str] = []
    Template.build(
        template,
        "sweflow-test-tool",
        cpu_count=2,
        memory_mb=512,
        on_build_logs=lambda entry: logs.append(entry.message),
    )
    assert Template.exists("sweflow-test-tool") and not Template.exists("no-such-template")
    assert any("is ready" in line for line in logs)
    sandbox = Sandbox.create("sweflow-test-tool", timeout=60)
    try:
        run = sandbox.commands.run("pwd; cat built.txt; echo $GREETING; ls /etc/motd || true")
        assert run.stdout.splitlines()[:3] == ["/opt/tools", "tool says hello", "hello"]
        assert "No such file" in run.stderr  # the RUN step's deletion is part of the template
        info = sandbox.get_info()
        assert (info.cpu_count, info.memory_mb) == (2, 512)  # the build's resources
    finally:
        sandbox.kill()


def test_a_failing_build_says_which_step_and_why(endpoint, tmp_path) -> None:
    with pytest.raises(BuildException, match="exited 3"):
        Template.build(Template().from_template("base").run_cmd("exit 3"), "sweflow-test-fails")
    with pytest.raises(BuildException, match="no registry"):
        Template.build(Template().from_image("python:3.11"), "sweflow-test-image")
    assert not Template.exists("sweflow-test-fails")
