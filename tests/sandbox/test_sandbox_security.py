"""Abuse cases against the local sandbox: each one checks that the host is unchanged and the
sandbox contained. Real sandboxes on the bookworm rootfs, no mocks; local backend only.

Every test asserts something that would fail if the protection it is named after were missing
(a private mount/pid/net/uts namespace, the read-only /proc and /dev binds, the cgroup limits,
the openat2-confined host-side file access, ...).
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import path_snapshot, tree_snapshot

from sweflow.sandbox import SandboxError, open_sandbox

pytestmark = pytest.mark.timeout(180)

REPO_ROOT = Path(__file__).resolve().parents[2]


def host_cmdlines() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            out[int(name)] = raw.replace(b"\0", b" ").decode(errors="replace")
    return out


def pids_with(marker: str) -> list[int]:
    return [pid for pid, cmd in host_cmdlines().items() if marker in cmd]


def unique_marker() -> str:
    """A sleep argument no other process on the host has: ``1000.<random digits>``."""
    return f"1000.{secrets.randbelow(10**9):09d}"


@pytest.fixture
def host_secret(tmp_path):
    """A random token in host files the sandbox must never read: one under the test's tmp dir,
    one under the host's /var/tmp (a path that exists in the rootfs too)."""
    token = f"HOST-SECRET-{secrets.token_hex(12)}"
    var_dir = Path(tempfile.mkdtemp(prefix="sweflow-secret-", dir="/var/tmp"))
    paths = [tmp_path / "secret.txt", var_dir / "secret.txt"]
    for path in paths:
        path.write_text(token + "\n")
    yield token, paths
    shutil.rmtree(var_dir, ignore_errors=True)


@pytest.fixture
def host_sleeper():
    """A process on the host (``sleep 1000.<marker>``) for the sandbox to try to see and kill."""
    marker = unique_marker()
    proc = subprocess.Popen(["sleep", marker])
    yield proc, marker
    proc.kill()
    proc.wait()


# -- the host's files -----------------------------------------------------------------------------


def test_cannot_read_host_file_by_absolute_path(local_sandbox, host_secret):
    token, paths = host_secret
    for path in paths:
        result = local_sandbox.exec(f"cat {path}")
        assert result.exit_code != 0
        assert token not in result.output
        assert "No such file" in result.output


def test_host_root_base_hides_what_root_can_read_on_the_host(open_local):
    """With the host's / as the base, root inside is root on the host: its secrets are masked."""
    from sweflow.sandbox import SandboxSpec

    sandbox = open_local(SandboxSpec(layers=[Path("/")], workdir="/"))
    for path in ("/etc/shadow", "/etc/gshadow"):
        if Path(path).is_file():
            assert sandbox.exec(f"cat {path}; echo x > {path}; cat {path}").output == "", path
            assert "x" not in Path(path).read_text().split("\n")  # the host file is untouched
    for folder in ("/etc/ssh", "/etc/ssl/private", "/root", "/home"):
        if Path(folder).is_dir():
            assert sandbox.exec(f"ls -A {folder}").output == "", folder  # no host keys


def test_cannot_read_host_file_via_dotdot(sandbox_spec, open_local, host_secret, tmp_path):
    token, paths = host_secret
    layer = tmp_path / "layer"  # a layer that sits right next to the secret on the host
    (layer / "testbed").mkdir(parents=True)
    sb = open_local(sandbox_spec(layer))
    tries = ["/../secret.txt", "/testbed/../../secret.txt", "../../../../../../secret.txt"]
    tries += [f"/testbed/../../../../..{p}" for p in paths]
    for path in tries:
        result = sb.exec(f"cat {path}")
        assert result.exit_code != 0, path
        assert token not in result.output


def test_host_secret_is_nowhere_in_the_sandbox(local_sandbox, host_secret):
    token, _ = host_secret
    result = local_sandbox.exec(
        f"grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e '{token}' / ; echo rc=$?",
        timeout=120,
    )
    assert result.output in ("rc=1\n", "rc=2\n"), result.output  # no file holds it


def test_writes_never_reach_the_lower_layers(bookworm_rootfs, sandbox_spec, open_local, tmp_path):
    layer = tmp_path / "layer"
    (layer / "testbed").mkdir(parents=True)
    (layer / "testbed" / "code.py").write_text("print('original')\n")
    (layer / "etc").mkdir()
    (layer / "etc" / "app.conf").write_text("debug = false\n")
    before_layer = tree_snapshot(layer)
    probe = ["etc/passwd", "etc/hostname", "usr/bin/ls", "usr/bin/python3.11", "etc/os-release"]
    before_base = {p: path_snapshot(bookworm_rootfs / p) for p in probe}
    base_dirs = {
        d: os.lstat(bookworm_rootfs / d).st_mtime_ns for d in ("etc", "usr/bin", "usr/share")
    }

    sb = open_local(sandbox_spec(layer))
    # Destructive on the test's own layer; on the shared base layer only changes that would be
    # harmless if they did get through (same mode/owner, appended text, a new mtime).
    abuse = """
        echo pwned > /testbed/code.py; rm -f /etc/app.conf; chmod 000 /testbed
        mkdir -p /testbed/d && mv /testbed/d /testbed/e && rm -rf /testbed/e
        echo '# sandbox' >> /etc/passwd; echo '# sandbox' >> /etc/hostname
        chmod 755 /usr/bin/python3.11; chown 0:0 /usr/bin/ls; touch -d 2001-01-01 /etc/os-release
        mkdir /etc/new-dir; ln -s /nowhere /usr/bin/new-link; touch /usr/share/new-file
    """
    assert sb.exec(abuse).ok
    assert sb.exec("cat /testbed/code.py").output == "pwned\n"  # it did happen, inside
    sb.close()

    assert tree_snapshot(layer) == before_layer
    assert {p: path_snapshot(bookworm_rootfs / p) for p in probe} == before_base
    assert {d: os.lstat(bookworm_rootfs / d).st_mtime_ns for d in base_dirs} == base_dirs
    assert not (bookworm_rootfs / "etc" / "new-dir").exists()


# -- the host's processes --------------------------------------------------------------------------


def test_host_processes_are_invisible(local_sandbox, host_sleeper):
    _, marker = host_sleeper
    listing = local_sandbox.exec("ps -eo pid,args").output
    assert marker not in listing
    pids = local_sandbox.exec("ls /proc | grep -c '^[0-9]'").output
    assert int(pids) <= 5, listing  # init, the shell, ls, grep
    assert local_sandbox.exec(f"test -e /proc/{os.getpid()}/cmdline").exit_code != 0
    cmdlines = local_sandbox.exec("for f in /proc/[0-9]*/cmdline; do cat $f; echo; done").output
    assert "sweflow-nsinit" in cmdlines and marker not in cmdlines


def test_cannot_kill_host_processes(local_sandbox, host_sleeper):
    proc, _ = host_sleeper
    result = local_sandbox.exec(f"kill -9 {proc.pid}; kill -STOP {proc.pid}")
    assert result.exit_code != 0
    assert "No such process" in result.output
    time.sleep(0.2)
    assert proc.poll() is None  # still running
    assert Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] in "SR"  # not stopped


def test_ptrace_and_proc_1_do_not_lead_to_the_host(local_sandbox, host_secret):
    token, paths = host_secret
    from sweflow.sandbox.local.build import nsinit_path

    binary = nsinit_path()
    before = os.stat(binary)
    result = local_sandbox.exec(
        f"cat /proc/1/root{paths[1]}; cat /proc/1/cwd{paths[1]}; ls /proc/1/root/; "
        "touch /proc/1/exe; chmod 755 /proc/1/exe; cat /proc/1/exe > /tmp/init.bin; "
        "cat /proc/1/environ"
    )
    assert token not in result.output
    assert "Permission denied" in result.output
    after = os.stat(binary)
    assert (after.st_mode, after.st_mtime_ns, after.st_ctime_ns) == (
        before.st_mode,
        before.st_mtime_ns,
        before.st_ctime_ns,
    )
    # PTRACE_ATTACH (16) to the init
    attach = local_sandbox.exec(
        'python3 -c "import ctypes; libc = ctypes.CDLL(None, use_errno=True); '
        'print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())"'
    )
    assert attach.output.split() == ["-1", "1"]  # EPERM


# -- the network ----------------------------------------------------------------------------------


def host_addresses() -> list[str]:
    """The host's own IPv4 addresses, loopback first."""
    addrs = ["127.0.0.1"]
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing address
        addr = probe.getsockname()[0]
        if addr not in addrs and addr != "0.0.0.0":
            addrs.append(addr)
    except OSError:
        pass
    finally:
        probe.close()
    return addrs


CONNECT = textwrap.dedent(
    """
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
        print("CONNECTED")
    except OSError as exc:
        print("FAILED", exc)
    """
)


def test_network_is_private(local_sandbox):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        local_sandbox.write("/tmp/connect.py", CONNECT)
        for addr in host_addresses():
            result = local_sandbox.exec(f"python3 /tmp/connect.py {addr} {port}")
            assert "FAILED" in result.output, (addr, result.output)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody got through
        # the sandbox's loopback works, for itself only
        local_sandbox.exec("python3 -m http.server -b 127.0.0.1 8765 >/dev/null 2>&1 &")
        inside = local_sandbox.exec(
            "for i in $(seq 50); do python3 /tmp/connect.py 127.0.0.1 8765 | grep -q CONN && "
            "echo up && break; sleep 0.1; done"
        )
        assert inside.output == "up\n"
        assert local_sandbox.exec("ls /sys/class/net").output.split() == ["lo"]
    finally:
        listener.close()


# -- mounts, devices, kernel ----------------------------------------------------------------------


def test_mounts_inside_are_not_visible_on_the_host(local_sandbox):
    marker = f"sweflow-evil-{secrets.token_hex(6)}"
    local_sandbox.exec(f"mount -t tmpfs {marker} /mnt")  # may be refused (no CAP_SYS_ADMIN)
    nested = local_sandbox.exec(
        f"unshare -Urm sh -c 'mount -t tmpfs {marker} /mnt && "
        f"grep -c {marker} /proc/self/mountinfo'"
    )
    host = Path("/proc/self/mountinfo").read_text() + Path("/proc/1/mountinfo").read_text()
    leaked = [line.split()[4] for line in host.splitlines() if marker in line]
    for point in leaked:  # the protection failed: take it off the host again
        subprocess.run(["umount", "-l", point], check=False)
    assert not leaked
    assert marker not in subprocess.run(["mount"], capture_output=True, text=True).stdout
    # in a nested namespace of its own the mount works (when unshare may), and stays there
    assert nested.output.strip() in ("1", "2", ""), nested.output


def test_no_host_block_devices(local_sandbox):
    devices = local_sandbox.exec("ls /dev").output.split()
    assert not [
        d for d in devices if d.startswith(("sd", "vd", "nvme", "xvd", "loop", "dm-", "mem"))
    ]
    for dev in ("/dev/vda", "/dev/sda", "/dev/nvme0n1"):
        result = local_sandbox.exec(f"mount {dev} /mnt")
        assert result.exit_code != 0
    assert local_sandbox.exec("ls /mnt | wc -l").output == "0\n"


def test_mknod_is_refused(local_sandbox):
    for args in ("/tmp/sda b 8 0", "/tmp/vda b 253 0", "/tmp/mem c 1 1", "/tmp/kmsg c 1 11"):
        result = local_sandbox.exec(f"mknod {args}")
        assert result.exit_code != 0
        assert "Operation not permitted" in result.output
    assert local_sandbox.exec("ls /tmp").output == ""


MODULES = textwrap.dedent(
    """
    import ctypes, errno, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    image = ctypes.create_string_buffer(b"\\x7fELF" + b"\\0" * 60)
    results = {}
    results["init_module"] = (libc.syscall(175, image, 64, b""), ctypes.get_errno())
    fd = os.open("/bin/true", os.O_RDONLY)
    results["finit_module"] = (libc.syscall(313, fd, b"", 0), ctypes.get_errno())
    results["delete_module"] = (libc.syscall(176, b"sweflow_no_such_mod", 0), ctypes.get_errno())
    print(results)
    """
)


def test_kernel_modules_cannot_be_loaded(local_sandbox):
    import errno as errno_

    local_sandbox.write("/tmp/modules.py", MODULES)
    result = local_sandbox.exec("python3 /tmp/modules.py")
    assert result.ok, result.output
    calls = eval(result.output)  # {name: (return value, errno)}
    for name, (ret, err) in calls.items():
        # EPERM; ENOSYS where the host kernel has no module support at all
        assert ret == -1 and err in (errno_.EPERM, errno_.ENOSYS), (name, ret, err)
    # writes back the value it has (harmless if the write got through, which it must not)
    modprobe = local_sandbox.exec(
        "v=$(cat /proc/sys/kernel/modprobe); echo $v > /proc/sys/kernel/modprobe"
    )
    assert modprobe.exit_code != 0


def test_hostname_change_stays_inside(local_sandbox):
    host_name = socket.gethostname()
    evil = f"evil-{secrets.token_hex(4)}"
    try:
        local_sandbox.exec(f"hostname {evil}")
        local_sandbox.exec(f"python3 -c \"import socket; socket.sethostname('{evil}')\"")
        local_sandbox.exec(f"echo {evil} > /proc/sys/kernel/hostname")
        assert socket.gethostname() == host_name
        assert Path("/proc/sys/kernel/hostname").read_text().strip() == host_name
    finally:
        if socket.gethostname() != host_name:  # the protection failed: put the host back
            socket.sethostname(host_name)
    inside = local_sandbox.exec("hostname").output.strip()
    assert inside in ("sandbox", evil)  # its own uts namespace, whatever happened in it


def test_proc_sys_is_read_only(local_sandbox):
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    result = local_sandbox.exec("echo 1 > /proc/sys/vm/drop_caches; echo rc=$?")
    assert "rc=1" in result.output and "Read-only file system" in result.output
    # each written back with the value it has: harmless if it got through (it must not)
    result = local_sandbox.exec(
        'v=$(cat /proc/sys/kernel/core_pattern); echo "$v" > /proc/sys/kernel/core_pattern; '
        "echo rc=$?; v=$(cat /proc/sys/kernel/sysrq); echo $v > /proc/sys/kernel/sysrq; echo rc=$?"
    )
    assert result.output.count("rc=1") == 2
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern
    # and the sandbox cannot lift it: no umount/remount, not even from a nested namespace
    result = local_sandbox.exec(
        "umount /proc/sys; umount -l /proc; mount -o remount,rw /proc/sys; "
        "unshare -Urm sh -c 'umount /proc/sys; echo 1 > /proc/sys/vm/drop_caches' ; "
        "grep ' /proc/sys ' /proc/self/mountinfo"
    )
    assert " ro," in result.output.splitlines()[-1]
    assert local_sandbox.exec("echo 1 > /proc/sys/vm/drop_caches").exit_code != 0


def test_sys_is_read_only(local_sandbox):
    result = local_sandbox.exec(
        'python3 -c "import os; '
        "os.open('/sys/kernel/mm/transparent_hugepage/enabled', os.O_RDWR)\""
        "; mount -o remount,rw /sys; touch /sys/kernel/x; grep ' /sys ' /proc/self/mountinfo"
    )
    assert "Read-only file system" in result.output
    assert result.output.splitlines()[-1].split()[5].startswith("ro")


def test_host_device_nodes_cannot_be_changed(local_sandbox):
    before = {d: os.stat(f"/dev/{d}") for d in ("null", "zero", "full", "urandom")}
    result = local_sandbox.exec(
        # modes and owners they already have: a change of ctime alone shows it got through
        "chmod 666 /dev/null; chown 0:0 /dev/zero; touch /dev/full /dev/urandom; "
        "rm -f /dev/null; ls -l /dev/null"
    )
    assert "Read-only file system" in result.output
    after = {d: os.stat(f"/dev/{d}") for d in before}
    for name, st in before.items():
        now = after[name]
        assert (now.st_mode, now.st_uid, now.st_mtime_ns, now.st_ctime_ns) == (
            st.st_mode,
            st.st_uid,
            st.st_mtime_ns,
            st.st_ctime_ns,
        ), name
    # the devices themselves still work
    assert local_sandbox.exec("echo x > /dev/null && head -c 3 /dev/zero | wc -c").output == "3\n"


# -- resource limits -------------------------------------------------------------------------------


def cgroup_file(sb, controller: str, name: str) -> Path | None:
    found = glob.glob(f"/sys/fs/cgroup/{controller}/sweflow/{sb.id}/{name}")
    found += glob.glob(f"/sys/fs/cgroup/sweflow/{sb.id}/{name}")  # cgroup v2
    return Path(found[0]) if found else None


def test_fork_bomb_is_contained(sandbox_spec, open_local):
    sb = open_local(sandbox_spec(limits={"pids": 64}))
    peak = [0]
    stop = threading.Event()
    current = cgroup_file(sb, "pids", "pids.current")

    def watch() -> None:
        while not stop.is_set() and current is not None:
            try:
                peak[0] = max(peak[0], int(current.read_text()))
            except (OSError, ValueError):
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        start = time.monotonic()
        result = sb.exec(":(){ :|:& };:; sleep 30", timeout=3)
        assert result.timed_out
        assert time.monotonic() - start < 20
        host = subprocess.run(["sh", "-c", "echo host-ok"], capture_output=True, text=True)
        assert host.stdout == "host-ok\n"  # the host can still fork
    finally:
        stop.set()
        watcher.join()
    if current is not None:
        assert 0 < peak[0] <= 64
    after = sb.exec("echo alive", timeout=30)
    assert "alive" in after.output
    init_pid = sb.init_pid
    start = time.monotonic()
    sb.close()
    assert time.monotonic() - start < 10
    assert not Path(f"/proc/{init_pid}").exists()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/sweflow/{sb.id}"))


def test_memory_bomb_is_killed_inside(sandbox_spec, open_local):
    sb = open_local(sandbox_spec(limits={"memory_bytes": 256 << 20}))
    result = sb.exec("python3 -c \"x = b'x' * (1 << 30); print('survived')\"", timeout=60)
    assert "survived" not in result.output.splitlines()
    assert result.exit_code == 137, result.output  # SIGKILL from the cgroup's OOM killer
    assert "Killed" in result.output
    assert sb.exec("echo still-here").output == "still-here\n"
    usage = cgroup_file(sb, "memory", "memory.max_usage_in_bytes") or cgroup_file(
        sb, "memory", "memory.peak"
    )
    if usage is not None:
        assert int(usage.read_text()) <= 256 << 20


def test_filling_tmp_hits_its_cap(sandbox_spec, open_local):
    sb = open_local(sandbox_spec(limits={"tmp_bytes": 16 << 20}))
    result = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=64")
    assert result.exit_code != 0
    assert "No space left on device" in result.output
    size = int(sb.exec("stat -c %s /tmp/fill").output)
    assert size <= 16 << 20
    assert sb.exec("df -k --output=size /tmp | tail -1").output.strip() == str(16 << 10)
    # nothing of it landed on the host's disk
    host_bytes = sum(p.stat().st_size for p in sb.dir.rglob("*") if p.is_file())
    assert host_bytes < 1 << 20
    assert sb.exec("rm /tmp/fill && echo ok").output == "ok\n"


def test_filling_the_upper_layer_hits_its_cap(bookworm_rootfs, sandbox_spec, open_local):
    sb = open_local(sandbox_spec(limits={"upper_bytes": 32 << 20}))
    base_bin = os.lstat(bookworm_rootfs / "usr" / "bin").st_mtime_ns
    result = sb.exec("dd if=/dev/zero of=/testbed/fill bs=1M count=100")
    assert result.exit_code != 0
    assert "No space left on device" in result.output
    assert int(sb.exec("stat -c %s /testbed/fill").output) <= 32 << 20
    result = sb.exec("cp -r /usr/lib /testbed/copy")
    assert "No space left on device" in result.output
    assert sb.exec(
        "rm -rf /testbed/fill /testbed/copy && echo hi > /testbed/ok && cat /testbed/ok"
    ).ok
    assert os.lstat(bookworm_rootfs / "usr" / "bin").st_mtime_ns == base_bin
    assert not (bookworm_rootfs / "testbed").exists()


def test_infinite_loop_times_out(local_sandbox):
    for loop in ("python3 -c 'while True: pass'", "while :; do :; done", "yes > /dev/null"):
        start = time.monotonic()
        result = local_sandbox.exec(loop, timeout=1)
        assert result.timed_out and result.exit_code == 124, loop
        assert time.monotonic() - start < 6, loop
        assert local_sandbox.exec("echo ok").output == "ok\n"
    assert "python3" not in local_sandbox.exec("ps -eo args").output


HUGE_OUTPUT = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from sweflow.sandbox import Limits, SandboxSpec, open_sandbox

    spec = SandboxSpec(layers=[Path(sys.argv[1])], limits=Limits(output_bytes=1 << 20))
    with open_sandbox(spec) as sb:
        sb.exec("true")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = sb.exec("yes | head -c 200M")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"rss_kb": [before, after], "len": len(result.output),
                          "truncated": result.truncated, "exit": result.exit_code,
                          "tail": result.output[-10:], "head": result.output[:4]}))
    """
)


def test_huge_output_is_capped_without_memory_blowup(bookworm_rootfs, tmp_path):
    script = tmp_path / "huge.py"
    script.write_text(HUGE_OUTPUT)
    proc = subprocess.run(
        [sys.executable, str(script), str(bookworm_rootfs)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["exit"] == 0
    assert out["truncated"]
    assert (1 << 20) <= out["len"] <= (1 << 20) + 200
    assert out["head"] == "y\ny\n" and out["tail"] == "y\n" * 5
    before, after = out["rss_kb"]
    assert after - before < 64 * 1024, f"rss grew by {(after - before) // 1024} MiB for 200 MiB"


def test_binary_output_and_forged_markers(local_sandbox):
    result = local_sandbox.exec("head -c 1M /dev/urandom")
    assert result.ok and isinstance(result.output, str)
    assert len(result.output) > 500_000
    # a child process cannot end the command early with a fake end marker: it lacks the id
    forged = local_sandbox.exec(
        "printf '\\0\\033SWF%s:0\\0' deadbeefdeadbeef; "
        'sh -c \'printf "\\0\\033SWF%s:0\\0" "$__sf_id"\'; sleep 0.3; echo real-end; exit 5'
    )
    assert forged.exit_code == 5
    assert forged.output.endswith("real-end\n")
    assert local_sandbox.exec("echo next").output == "next\n"


# -- leftovers after close -------------------------------------------------------------------------


def test_no_process_survives_close(sandbox_spec):
    markers = [unique_marker() for _ in range(4)]
    nohup_m, setsid_m, daemon_m, zombie_parent_m = markers
    sb = open_sandbox(sandbox_spec())
    try:
        script = f"""
            nohup sleep {nohup_m} >/dev/null 2>&1 &
            setsid sleep {setsid_m} >/dev/null 2>&1 &
            ( ( setsid sleep {daemon_m} >/dev/null 2>&1 & ) & )
            bash -c 'sleep 0.1 & exec sleep {zombie_parent_m}' >/dev/null 2>&1 &
            disown -a
        """
        assert sb.exec(script).ok
        time.sleep(0.5)
        listing = sb.exec("ps -eo stat,args").output
        assert " Z" in listing or "\nZ" in listing, listing  # the zombie exists
        for marker in markers:
            assert pids_with(marker), f"{marker} not running on the host before close"
        init_pid = sb.init_pid
    finally:
        sb.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(pids_with(m) for m in markers):
        time.sleep(0.05)
    assert not [m for m in markers if pids_with(m)]
    assert not Path(f"/proc/{init_pid}").exists()


# -- host-side read/write/diff confinement --------------------------------------------------------


def test_read_through_symlinks_stays_inside(local_sandbox, host_secret, bookworm_rootfs):
    token, paths = host_secret
    sb = local_sandbox
    sb.exec(f"ln -s {paths[0]} /testbed/abs; ln -s ../../../../../../..{paths[1]} /testbed/rel")
    sb.exec("ln -s /proc/1/root/etc/passwd /testbed/magic; ln -s /etc/passwd /testbed/pw")
    sb.exec("ln -s /proc/self/root/etc/hostname /testbed/self")
    for link in ("/testbed/abs", "/testbed/rel", "/testbed/magic", "/testbed/self"):
        try:
            data = sb.read(link)
        except SandboxError:
            continue
        assert token.encode() not in data, link
    # an in-sandbox absolute link resolves to the sandbox's file
    assert sb.read("/testbed/pw") == (bookworm_rootfs / "etc" / "passwd").read_bytes()
    sb.exec(f"mkdir -p {paths[1].parent} && echo sandbox-copy > {paths[1]}")
    assert sb.read("/testbed/rel") == b"sandbox-copy\n"


def test_write_through_symlinks_stays_inside(local_sandbox, tmp_path):
    sb = local_sandbox
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    sb.exec(f"ln -s {host_dir} /testbed/link2; ln -s {host_dir}/final /testbed/link3")
    sb.exec(f"ln -s ../../../../../..{host_dir} /testbed/rel-link")
    # the link targets do not exist inside: refused, or created inside; never on the host
    for path in ("/testbed/link2/x", "/testbed/link3", "/testbed/rel-link/sub/y"):
        try:
            sb.write(path, "first try")
        except SandboxError:
            pass
    assert list(host_dir.iterdir()) == []
    assert sb.exec(f"mkdir -p {host_dir}").ok  # now the targets exist, inside
    sb.write("/testbed/link2/x", "through a dir link")
    sb.write("/testbed/link3", "through a file link")
    sb.write("/testbed/rel-link/sub/y", "through a relative link")
    assert list(host_dir.iterdir()) == []
    # where they went: the same paths inside the sandbox
    assert sb.exec(f"cat {host_dir}/x").output == "through a dir link"
    assert sb.exec(f"cat {host_dir}/final").output == "through a file link"
    assert sb.exec(f"cat {host_dir}/sub/y").output == "through a relative link"


def test_dotdot_and_relative_paths_in_read_write(local_sandbox, host_secret, tmp_path):
    token, paths = host_secret
    sb = local_sandbox
    for path in paths:
        with pytest.raises(SandboxError):
            sb.read("/../../../.." + str(path))
        with pytest.raises(SandboxError):
            sb.read("/testbed/../../.." + str(path))
    victim = tmp_path / "victim-dir"
    victim.mkdir()
    sb.write("/../../../.." + str(victim / "z"), "dotdot")
    sb.write("/testbed/../../../.." + str(victim / "w"), "dotdot")
    assert list(victim.iterdir()) == []
    for bad in ("etc/passwd", "./etc/passwd", "../etc/passwd", ""):
        with pytest.raises(SandboxError, match="absolute"):
            sb.read(bad)
        with pytest.raises(SandboxError, match="absolute"):
            sb.write(bad, "x")


def test_diff_does_not_follow_symlinks_to_host(sandbox_spec, open_local, git_layer, host_secret):
    token, paths = host_secret
    sb = open_local(sandbox_spec(git_layer))
    sb.exec(f"ln -s {paths[0]} /testbed/leak; ln -s {paths[1]} /testbed/leak2; echo x >> README.md")
    patch = sb.diff()
    assert "leak" in patch and "README.md" in patch
    assert token not in patch


# -- sandboxes against each other ------------------------------------------------------------------


def test_sandboxes_cannot_see_each_other(sandbox_spec, open_local):
    token = f"A-SECRET-{secrets.token_hex(8)}"
    marker = unique_marker()
    a = open_local(sandbox_spec())
    b = open_local(sandbox_spec())
    assert a.exec(
        f"echo {token} > /tmp/a.txt; echo {token} > /testbed/a.txt; echo {token} > /dev/shm/a.txt; "
        f"sleep {marker} &"
    ).ok
    deadline = time.monotonic() + 5
    while not pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    a_pids = pids_with(marker)
    assert a_pids
    listing = b.exec("ps -eo args").output
    assert marker not in listing
    found = b.exec(
        f"grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e '{token}' / ; echo rc=$?",
        timeout=120,
    )
    assert found.output in ("rc=1\n", "rc=2\n"), found.output  # no file holds it
    guesses = " ".join(f"/proc/{pid}/root/tmp/a.txt" for pid in [*a_pids, a.init_pid])
    tried = b.exec(f"cat {guesses} /proc/*/root/tmp/a.txt /proc/*/root/testbed/a.txt 2>&1")
    assert token not in tried.output
    assert b.exec("test -e /run/sweflow").exit_code == 1  # the host's state dir is not there
    assert b.exec("ls -A /sys/fs/cgroup").output == ""
    # and B's own writes stay B's
    b.exec("echo b-only > /tmp/a.txt")
    assert a.read("/tmp/a.txt").decode().strip() == token
