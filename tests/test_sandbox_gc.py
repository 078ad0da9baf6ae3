"""Crash recovery: a sandbox whose owner was SIGKILLed leaves nothing after `sandbox gc`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.local import hostroot
from sweflow.sandbox.local.gc import collect_garbage
from sweflow.sandbox.local.leaks import leftovers
from sweflow.sandbox.local.state import state_dir
from sweflow.sandbox.mounts import mount_points
from sweflow.sandbox.procs import running

OWNER_SCRIPT = """
import json, sys, time
from pathlib import Path
from sweflow.sandbox import SandboxSpec, open_sandbox
sb = open_sandbox(SandboxSpec(layers=[Path(sys.argv[1])]))
sb.exec("sleep 1000.424242 >/dev/null 2>&1 &")
print(json.dumps({"id": sb.id, "keeper": sb._proc.pid, "init": sb.init_pid}), flush=True)
time.sleep(1000)
"""


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


def test_host_root_layer_is_read_only_and_masked(tmp_path: Path) -> None:
    secret = Path("/root") / f".sweflow-test-secret-{os.getpid()}"
    secret.write_text("host secret")
    spec = SandboxSpec(layers=[Path("/")], workdir="/")
    try:
        with open_sandbox(spec) as sandbox, open_sandbox(spec) as other:
            assert sandbox.exec(f"cat {secret}").exit_code != 0  # /root is masked
            assert sandbox.exec("test -x /bin/sh && echo yes").output == "yes\n"
            assert sandbox.exec("echo x > /usr/sweflow-written && cat /usr/sweflow-written").ok
            other.close()  # the view stays while one sandbox still uses it
            assert str(hostroot.VIEW) in mount_points()
            assert sandbox.exec("test -x /bin/sh").ok
        assert not Path("/usr/sweflow-written").exists()
    finally:
        secret.unlink()
    assert str(hostroot.VIEW) not in mount_points()  # the last one out unmounted it


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

    thread = threading.Thread(target=gc_loop)
    thread.start()
    try:
        for i in range(30):
            with open_sandbox(SandboxSpec(layers=[bookworm_rootfs])) as sandbox:
                assert sandbox.exec(f"sleep 0.05; echo {i}").output == f"{i}\n"
    finally:
        stop.set()
        thread.join()
    assert errors == [] and rounds[0] > 30
