"""What is particular to the local (container-free) backend, end to end: no mocks.

Every test opens real sandboxes on the debootstrapped bookworm rootfs (``bookworm_rootfs``).
The protocol itself (exec, timeouts, output, files, diff, close, asyncio) is checked on every
backend by test_sandbox_contract.py; security, limits and gc have their own files.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import tree_snapshot

from sweflow.sandbox import SandboxError, open_sandbox

pytestmark = pytest.mark.timeout(180)

REPO_ROOT = Path(__file__).resolve().parents[2]


# -- layers ---------------------------------------------------------------------------------------


def test_layering_overrides_deletes_and_leaves_layers_untouched(
    bookworm_rootfs, sandbox_spec, open_local, tmp_path
):
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "data").mkdir(parents=True)
    (upper / "data").mkdir(parents=True)
    (lower / "data" / "shared.txt").write_text("from lower\n")
    (lower / "data" / "only-lower.txt").write_text("lower only\n")
    (lower / "data" / "doomed.txt").write_text("delete me\n")
    (upper / "data" / "shared.txt").write_text("from upper\n")
    before = {d: tree_snapshot(d) for d in (lower, upper)}
    base_before = tree_snapshot(bookworm_rootfs, contents=False)

    sb = open_local(sandbox_spec(lower, upper))
    assert sb.exec("cat /data/shared.txt").output == "from upper\n"
    assert sb.exec("cat /data/only-lower.txt").output == "lower only\n"
    assert sb.exec("rm /data/doomed.txt").ok
    assert sb.exec("ls /data").output.split() == ["only-lower.txt", "shared.txt"]
    assert sb.exec("test -e /data/doomed.txt").exit_code == 1
    with pytest.raises(SandboxError):
        sb.read("/data/doomed.txt")
    sb.write("/data/shared.txt", "rewritten\n")
    assert sb.exec("echo more >> /data/only-lower.txt; chmod 600 /data/only-lower.txt").ok
    assert sb.exec("echo '# x' >> /etc/passwd && touch /bin/ls && rm /etc/hostname").ok
    assert sb.exec("test -e /data/doomed.txt || echo still-gone").output == "still-gone\n"
    assert sb.read("/data/shared.txt") == b"rewritten\n"
    sb.close()

    assert {d: tree_snapshot(d) for d in (lower, upper)} == before
    assert tree_snapshot(bookworm_rootfs, contents=False) == base_before


def test_disk_upper_keeps_writes_after_close(sandbox_spec, tmp_path):
    upper_dir = tmp_path / "upper"
    with open_sandbox(sandbox_spec(upper="disk", upper_dir=upper_dir)) as sb:
        assert sb.exec(
            "echo kept > /testbed/kept.txt && mkdir -p /opt/app && echo v1 > /opt/app/cfg"
        ).ok
        sb.write("/testbed/written.bin", b"\x00\x01")
    assert (upper_dir / "testbed" / "kept.txt").read_text() == "kept\n"
    assert (upper_dir / "opt" / "app" / "cfg").read_text() == "v1\n"
    assert (upper_dir / "testbed" / "written.bin").read_bytes() == b"\x00\x01"
    # overlayfs' scratch work dir is removed, only the upper remains
    assert [p.name for p in tmp_path.iterdir()] == ["upper"]
    # reopening on the same upper sees the earlier writes
    with open_sandbox(sandbox_spec(upper="disk", upper_dir=upper_dir)) as sb:
        assert sb.exec("cat /testbed/kept.txt").output == "kept\n"


def test_missing_layer_dir_is_named(sandbox_spec, tmp_path):
    missing = tmp_path / "no-such-layer"
    with pytest.raises(SandboxError, match="no-such-layer"):
        open_sandbox(sandbox_spec(missing))


@pytest.mark.isolating  # opens a local sandbox itself
def test_layer_without_bash_fails_clearly(tmp_path):
    from sweflow.sandbox import SandboxSpec

    empty = tmp_path / "empty-layer"
    (empty / "etc").mkdir(parents=True)
    start = time.monotonic()
    with pytest.raises(SandboxError) as info:
        open_sandbox(SandboxSpec(layers=[empty], workdir="/testbed"))
    assert time.monotonic() - start < 15
    assert "/bin/bash" in str(info.value)
    assert "layers" in str(info.value)


# -- lifecycle ------------------------------------------------------------------------------------


def test_close_kills_the_init_and_removes_the_state_dir(sandbox_spec):
    with open_sandbox(sandbox_spec()) as sb:
        assert sb.exec("echo in").output == "in\n"
        init_pid, state = sb.init_pid, sb.dir
        assert Path(f"/proc/{init_pid}").exists()
        assert state.is_dir()
    assert not Path(f"/proc/{init_pid}").exists()
    assert not state.exists()


# -- files ----------------------------------------------------------------------------------------


def test_read_and_write_refuse_a_fifo_without_blocking_on_it(local_sandbox):
    """A FIFO opened to read waits for a writer, and to write for a reader: forever, in the
    host thread that opened it (issue 54). Both are refused before any open that waits."""
    sb = local_sandbox
    assert sb.exec("mkfifo /testbed/pipe && ln -s /testbed/pipe /testbed/to-pipe").ok
    outcome: dict[str, str] = {}

    def attempt(name, call) -> None:
        try:
            call()
            outcome[name] = "done"
        except SandboxError as exc:
            outcome[name] = str(exc)

    calls = {
        "read": lambda: sb.read("/testbed/pipe"),
        "read-link": lambda: sb.read("/testbed/to-pipe"),
        "write": lambda: sb.write("/testbed/pipe", "x"),
        "write-link": lambda: sb.write("/testbed/to-pipe", "x"),
    }
    threads = [threading.Thread(target=attempt, args=item, daemon=True) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)  # a blocked open never returns: the check below names it
    assert {name: "not a regular file" in outcome.get(name, "blocked") for name in calls} == {
        name: True for name in calls
    }, outcome
    assert sb.exec("test -p /testbed/pipe").ok  # refused, not replaced


# -- rootless and error messages -------------------------------------------------------------------

ROOTLESS_USER = "sweflow-test"

ROOTLESS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from sweflow.sandbox import Limits, SandboxError, SandboxSpec, open_sandbox

    layer, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "cgroups":
        limits = Limits(memory_bytes=256 << 20, pids=64, cpus=None)
    else:
        limits = Limits(memory_bytes=None, pids=None, cpus=None)
    try:
        with open_sandbox(SandboxSpec(layers=[layer], workdir="/testbed", limits=limits)) as sb:
            out = {"id": sb.exec("id -u").output, "false": sb.exec("false").exit_code}
            sb.write("/testbed/sub/hello.txt", b"from host")
            out["cat"] = sb.exec("cat /testbed/sub/hello.txt").output
            sb.exec("printf from-sandbox > /testbed/made.txt")
            out["read"] = sb.read("/testbed/made.txt").decode()
            out["dropcaches"] = sb.exec("echo 1 > /proc/sys/vm/drop_caches").exit_code
    except SandboxError as exc:
        print(json.dumps({"error": str(exc)}))
        sys.exit(3)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="session")
def rootless_env(bookworm_rootfs):
    """An unprivileged user and a private copy of the rootfs it owns (made once per session)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create the unprivileged test user")
    if not (shutil.which("setpriv") and shutil.which("useradd")):
        pytest.skip("needs setpriv and useradd (util-linux, passwd)")
    try:
        pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                ROOTLESS_USER,
            ],
            check=True,
            capture_output=True,
        )
    user = pwd.getpwnam(ROOTLESS_USER)
    base = Path(tempfile.mkdtemp(prefix="sweflow-rootless-"))
    try:
        subprocess.run(["cp", "-a", str(bookworm_rootfs), str(base / "rootfs")], check=True)
        for sub in ("home", "state", "cache"):
            (base / sub).mkdir()
        (base / "run.py").write_text(ROOTLESS_SCRIPT)
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(base)], check=True)
        base.chmod(0o755)
        yield user, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_as(user: pwd.struct_passwd, base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base / "home"),
        "SWEFLOW_STATE_DIR": str(base / "state"),
        "SWEFLOW_CACHE": str(base / "cache"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    return subprocess.run(
        [*argv, sys.executable, str(base / "run.py"), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.rootless
def test_rootless_sandbox_works(rootless_env):
    user, base = rootless_env
    before = tree_snapshot(base / "rootfs" / "etc")
    proc = run_as(user, base, str(base / "rootfs"), "plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "id": "0\n",
        "false": 1,
        "cat": "from host",
        "read": "from-sandbox",
        "dropcaches": 1,
    }
    assert not (base / "rootfs" / "testbed").exists()  # writes stayed in the upper
    assert tree_snapshot(base / "rootfs" / "etc") == before
    assert list((base / "state").iterdir()) == []  # closed cleanly


@pytest.mark.rootless
def test_rootless_with_cgroup_limits_is_a_clear_error(rootless_env):
    user, base = rootless_env
    proc = run_as(user, base, str(base / "rootfs"), "cgroups")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # a SandboxError, not a traceback
    message = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert "cgroups" in message
    assert "None" in message  # it says how to go on without them
    assert list((base / "state").iterdir()) == []


USERNS_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sweflow.sandbox import Limits, SandboxError, SandboxSpec, open_sandbox

    limits = Limits(memory_bytes=None, pids=None, cpus=None)
    try:
        open_sandbox(SandboxSpec(layers=[Path(sys.argv[1])], limits=limits)).close()
    except SandboxError as exc:
        print(exc)
        sys.exit(3)
    print("opened")
    """
)


def test_user_namespaces_disabled_is_a_clear_error(bookworm_rootfs, tmp_path):
    """max_user_namespaces=0 is set in a throwaway user namespace, never on the host itself,
    so sandboxes that other processes open meanwhile are not disturbed."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    script = tmp_path / "userns.py"
    script.write_text(USERNS_SCRIPT)
    (tmp_path / "state").mkdir()
    host_limit = Path("/proc/sys/user/max_user_namespaces").read_text()
    inner = f'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" {script} {bookworm_rootfs}'
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", inner, sys.executable],
        env={
            **os.environ,
            "SWEFLOW_STATE_DIR": str(tmp_path / "state"),
            "PYTHONPATH": str(REPO_ROOT),
        },
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert Path("/proc/sys/user/max_user_namespaces").read_text() == host_limit
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "user namespaces" in proc.stdout
    assert "max_user_namespaces" in proc.stdout
    assert list((tmp_path / "state").iterdir()) == []


def test_the_inits_ready_may_come_before_the_keepers_pid() -> None:
    """The init runs in new namespaces while its keeper reports its pid; on a loaded host the
    init's "ready" reached the control pipe first, the wait for "pid" threw it away, and the
    sandbox failed after 120 s with its init long ready (seen in CI, 2026-11-26: "did not report
    'ready' ... state S, in do_wait"). Both messages are read here in that order."""
    import select

    from sweflow.sandbox.local.backend import LocalSandbox

    read_end, write_end = os.pipe()
    sandbox = LocalSandbox.__new__(LocalSandbox)  # its control channel alone
    sandbox.id, sandbox.init_pid, sandbox._ctl, sandbox._ctl_buf = "t", os.getpid(), read_end, b""
    sandbox._poll = select.poll()
    sandbox._poll.register(read_end, select.POLLIN)
    try:
        os.write(write_end, b"ready 7\npid 4242\n")
        assert sandbox._await_ctl("pid", 2.0) == ["4242"]
        assert sandbox._await_ctl("ready", 2.0) == ["7"]
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_sandbox_that_never_becomes_ready_is_named_with_where_its_init_waits() -> None:
    """The start error says what the stuck process was doing (state, and the top of its kernel
    stack when the host lets root read it), or that it is gone."""
    from sweflow.sandbox.local.backend import _blocked_in
    from sweflow.sandbox.procs import stat_fields

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while stat_fields(sleeper.pid)[0] != "S":  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        said = _blocked_in(sleeper.pid)
        assert said.startswith(f" (process {sleeper.pid}: state S")
        if os.geteuid() == 0:
            assert "nanosleep" in said, said
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _blocked_in(sleeper.pid) == f" (process {sleeper.pid} is gone)"
