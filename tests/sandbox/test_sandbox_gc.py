"""Crash recovery: a sandbox whose owner was SIGKILLed leaves nothing after `sandbox gc`, and gc
touches nothing of a live sandbox, whichever state directory it is in. Each test keeps its
sandboxes in a state directory of its own and counts only what is left there: other users of the
host (another test run, a second user) open and close sandboxes meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.local.gc import collect_garbage
from sweflow.sandbox.local.leaks import leftovers
from sweflow.sandbox.local.state import state_dir
from sweflow.sandbox.mounts import mount_points
from sweflow.sandbox.procs import running

OWNER_SCRIPT = """
import json, sys, time
from pathlib import Path
import pytest

from sweflow.sandbox import SandboxSpec, open_sandbox
sb = open_sandbox(SandboxSpec(layers=[Path(sys.argv[1])]))
sb.exec("sleep 1000.424242 >/dev/null 2>&1 &")
print(json.dumps({"id": sb.id, "keeper": sb._proc.pid, "init": sb.init_pid}), flush=True)
time.sleep(1000)
"""


@pytest.fixture(autouse=True)
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state directory of this test's own (the crashed owners' processes inherit it)."""
    folder = tmp_path / "state"
    monkeypatch.setenv("SWEFLOW_STATE_DIR", str(folder))
    return folder


def _cgroups_of(sandbox_id: str) -> list[Path]:
    root = Path("/sys/fs/cgroup")  # v1 hierarchies, then v2
    return [*root.glob(f"*/sweflow/{sandbox_id}"), *root.glob(f"sweflow/{sandbox_id}")]


def _crash_owner(rootfs: Path, kill_keeper: bool) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, str(rootfs)], stdout=subprocess.PIPE, text=True
    )
    info = json.loads(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    if kill_keeper:
        os.kill(info["keeper"], signal.SIGKILL)
    proc.wait()
    return info


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_owner_crash_kills_processes_and_gc_removes_the_rest(bookworm_rootfs: Path) -> None:
    before = leftovers()
    info = _crash_owner(bookworm_rootfs, kill_keeper=False)
    _wait_gone([info["keeper"], info["init"]])
    assert not running(info["init"]) and not running(info["keeper"])
    assert (state_dir() / info["id"]).exists()  # the crash left its directory...
    report = collect_garbage()
    assert info["id"] in report.removed_dirs
    assert not (state_dir() / info["id"]).exists()
    after = leftovers()
    assert {k: set(v) - set(before[k]) for k, v in after.items()} == {k: set() for k in after}


def test_keeper_crash_takes_the_whole_sandbox(bookworm_rootfs: Path) -> None:
    info = _crash_owner(bookworm_rootfs, kill_keeper=True)
    _wait_gone([info["init"]])
    assert not running(info["init"])
    marker = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, "1000.424242")]
    assert marker == []
    collect_garbage()
    assert not (state_dir() / info["id"]).exists()


def _cmdline_has(pid: str, needle: str) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_gc_keeps_live_sandboxes(bookworm_rootfs: Path) -> None:
    with open_sandbox(SandboxSpec(layers=[bookworm_rootfs])) as sandbox:
        report = collect_garbage()
        assert sandbox.id in report.live
        assert sandbox.exec("echo alive").output == "alive\n"


@pytest.mark.isolating  # opens a local sandbox itself
def test_host_root_layer_is_read_only_and_masked(tmp_path: Path) -> None:
    secret = Path("/root") / f".sweflow-test-secret-{os.getpid()}"
    secret.write_text("host secret")
    spec = SandboxSpec(layers=[Path("/")], workdir="/")
    try:
        with open_sandbox(spec) as sandbox, open_sandbox(spec) as other:
            assert sandbox.exec(f"cat {secret}").exit_code != 0  # /root is masked
            assert sandbox.exec("test -x /bin/sh && echo yes").output == "yes\n"
            # the host's folders are not root inside's; its own / is
            assert "Permission denied" in sandbox.exec("echo x > /usr/sweflow-written").output
            assert sandbox.exec("echo x > /sweflow-written && cat /sweflow-written").ok
            other.close()
            assert sandbox.exec("test -x /bin/sh").ok
            assert [p for p in mount_points() if "sweflow" in p and "hostroot" in p] == []
        assert not Path("/usr/sweflow-written").exists() and not Path("/sweflow-written").exists()
    finally:
        secret.unlink()


def test_gc_never_touches_a_sandbox_that_opens_while_it_runs(bookworm_rootfs: Path) -> None:
    """gc lists sandbox folders, then cgroups: one opened in between must survive both, and
    one closing meanwhile must not make gc fail."""
    import threading

    stop = threading.Event()
    errors: list[BaseException] = []
    rounds = [0]

    def gc_loop() -> None:
        while not stop.is_set():
            try:
                collect_garbage()
                rounds[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

    thread = threading.Thread(target=gc_loop)  # with SWEFLOW_STATE_DIR set, as the test runs
    thread.start()
    try:
        for i in range(30):
            with open_sandbox(SandboxSpec(layers=[bookworm_rootfs])) as sandbox:
                assert sandbox.exec(f"sleep 0.05; echo {i}").output == f"{i}\n"
    finally:
        stop.set()
        thread.join()
    assert errors == [] and rounds[0] > 30


def test_gc_of_one_state_directory_spares_another_ones_live_sandboxes(
    bookworm_rootfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: gc SIGKILLed every sweflow cgroup that was not live in its own state directory,
    so a gc for folder a killed folder b's open sandbox. It still removes b's dead ones."""
    monkeypatch.setenv("SWEFLOW_STATE_DIR", str(tmp_path / "b"))
    dead = _crash_owner(bookworm_rootfs, kill_keeper=False)
    _wait_gone([dead["keeper"], dead["init"]])
    with open_sandbox(SandboxSpec(layers=[bookworm_rootfs])) as live:
        groups = _cgroups_of(live.id)
        monkeypatch.setenv("SWEFLOW_STATE_DIR", str(tmp_path / "a"))
        report = collect_garbage()
        assert live.id in report.live
        assert groups and all(group.is_dir() for group in groups)
        assert live.exec("echo alive").output == "alive\n"
        assert dead["id"] in report.removed_dirs  # dead is dead, whichever folder holds it
        assert not (tmp_path / "b" / dead["id"]).exists() and _cgroups_of(dead["id"]) == []
