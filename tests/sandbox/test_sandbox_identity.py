"""The local sandbox's host identity: root inside is an unprivileged host uid, so nothing the
host's root owns is reachable from inside (its files, its cgroups), while layers keep their
owners. Each escape test names what a sandbox managed to do when its root was the host's root
(issue 54, item 2); real sandboxes on the bookworm rootfs, no mocks.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

import pytest

from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.local.cgroups import hierarchies
from sweflow.sandbox.procs import running

pytestmark = pytest.mark.timeout(180)

MB = 1 << 20


def _ranges(uid_map: str) -> list[tuple[int, int, int]]:
    return [tuple(map(int, line.split())) for line in uid_map.splitlines() if line.strip()]


def _host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def _cgroup_dir(sb, controller: str) -> Path:
    return hierarchies()[controller].root / "sweflow" / sb.id


def _needs_v1(*controllers: str) -> None:
    found = hierarchies()
    if not all(name in found and found[name].version == 1 for name in controllers):
        pytest.skip(f"needs the cgroup v1 hierarchies of {', '.join(controllers)}")


def _cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1] == "cgroup2":
            return Path(fields[4])
    return None


# -- who root inside is ------------------------------------------------------------------------


def test_root_inside_is_not_the_hosts_root(local_sandbox):
    """Before: uid_map was ``0 0 4294967295``: root inside was host uid 0."""
    inside = local_sandbox.exec("id -u; cat /proc/self/uid_map /proc/self/gid_map").output
    assert inside.splitlines()[0] == "0"
    for _inside, host, count in _ranges("\n".join(inside.splitlines()[1:])):
        assert not host <= 0 < host + count, inside  # host id 0 is mapped to nothing inside
    shell = local_sandbox._shell_host_pid()
    assert _host_uid(shell) != 0 and _host_uid(local_sandbox.init_pid) != 0


def test_layers_keep_their_owners_modes_and_set_uid_bits(sandbox_spec, open_local, tmp_path):
    layer = tmp_path / "layer"
    (layer / "testbed" / "www").mkdir(parents=True)
    for name, owner, mode in [("root.txt", 0, 0o600), ("user.txt", 1000, 0o640)]:
        path = layer / "testbed" / name
        path.write_text(name)
        os.chown(path, owner, owner)
        path.chmod(mode)
    os.chown(layer / "testbed" / "www", 33, 33)
    shutil.copy("/bin/true", layer / "testbed" / "suid")
    (layer / "testbed" / "suid").chmod(0o4755)
    sb = open_local(sandbox_spec(layer))
    listing = sb.exec("stat -c '%n %u %g %a' root.txt user.txt www suid; cat root.txt").output
    assert listing.splitlines() == [
        "root.txt 0 0 600",
        "user.txt 1000 1000 640",
        "www 33 33 755",
        "suid 0 0 4755",
        "root.txt",  # root inside reads the layer's root-only file: it is root of the layer
    ]
    # copy-up and chown inside keep working
    assert sb.exec("chown 1000:1000 root.txt && echo x >> user.txt && stat -c %u root.txt").ok


def test_disk_upper_stores_files_with_the_owners_a_host_root_build_gives(sandbox_spec, tmp_path):
    """A layer captured from a disk upper is the same whoever built it: root inside is disk 0."""
    upper = tmp_path / "upper"
    with open_sandbox(sandbox_spec(upper="disk", upper_dir=upper)) as sb:
        script = "touch /root.txt && touch /user.txt && chown 1000:1000 /user.txt && rm /etc/issue"
        assert sb.exec(script).ok
        sb.write("/testbed/written.txt", "from the host")
    owners = {p.name: (p.lstat().st_uid, p.lstat().st_gid) for p in upper.rglob("*")}
    assert owners["root.txt"] == (0, 0) and owners["user.txt"] == (1000, 1000)
    assert owners["written.txt"] == (0, 0) and owners["testbed"] == (0, 0)
    assert stat.S_ISCHR((upper / "etc" / "issue").lstat().st_mode)  # overlayfs's whiteout
    assert (upper / "etc" / "issue").lstat().st_uid == 0


def test_files_the_host_writes_belong_to_root_inside(local_sandbox):
    local_sandbox.write("/testbed/new/dir/file.txt", "x")
    assert local_sandbox.exec("stat -c %u:%g /testbed/new /testbed/new/dir/file.txt").output == (
        "0:0\n0:0\n"
    )


# -- the host's files ------------------------------------------------------------------------------


@pytest.fixture
def root_only_host_files():
    """A 0600 and a 0640 file of the host's root, outside every path the host base masks."""
    token = f"ROOT-ONLY-{secrets.token_hex(12)}"
    folder = Path("/var/lib") / f"sweflow-test-{secrets.token_hex(6)}"
    folder.mkdir(mode=0o755)
    files = []
    for name, mode in [("key", 0o600), ("shadowish", 0o640)]:
        path = folder / name
        path.write_text(token + "\n")
        path.chmod(mode)
        files.append(path)
    yield token, files
    shutil.rmtree(folder)


def test_host_base_keeps_root_only_files_unreadable(open_local, root_only_host_files):
    """Before: with ``--base host`` root inside read every 0600 file the deny-list missed."""
    token, files = root_only_host_files
    sb = open_local(SandboxSpec(layers=[Path("/")], workdir="/"))
    for path in files:
        result = sb.exec(f"cat {path}")
        assert result.exit_code != 0 and token not in result.output, path
        assert "Permission denied" in result.output
        assert sb.exec(f"echo x > {path}").exit_code != 0
        assert path.read_text() == token + "\n"
    assert sb.exec("test -r /etc/os-release && echo readable").output == "readable\n"


# -- the host's cgroups ----------------------------------------------------------------------------

LIFT_LIMITS = """unshare -Urm -C sh -c '
mkdir -p /tmp/m /tmp/p
mount -t cgroup -o memory none /tmp/m
[ -e /tmp/m/memory.memsw.limit_in_bytes ] && echo -1 > /tmp/m/memory.memsw.limit_in_bytes
echo -1 > /tmp/m/memory.limit_in_bytes
mount -t cgroup -o pids none /tmp/p && echo max > /tmp/p/pids.max
true'"""

ALLOCATE = "python3 -c \"x = b'x' * (400 << 20); print('survived')\""

FORK = """python3 -c '
import os, time
n = 0
for _ in range(150):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print(n)'"""


def test_cgroup_v1_remount_cannot_lift_the_limits(sandbox_spec, open_local):
    """Before: a new user+cgroup namespace inside mounted the v1 memory and pids hierarchies,
    wrote memory.limit_in_bytes=-1 and pids.max=max, then allocated 400 MB under a 128 MB cap
    and started 150 processes under 64."""
    _needs_v1("memory", "pids")
    sb = open_local(sandbox_spec(limits={"memory_bytes": 128 * MB, "pids": 64}))
    sb.exec(LIFT_LIMITS, timeout=30)
    assert (_cgroup_dir(sb, "memory") / "memory.limit_in_bytes").read_text() == f"{128 * MB}\n"
    assert (_cgroup_dir(sb, "pids") / "pids.max").read_text() == "64\n"
    assert "survived" not in sb.exec(ALLOCATE, timeout=60).output.splitlines()
    started = sb.exec(FORK, timeout=60).output.split()
    assert started and int(started[-1]) < 64, started


def test_cgroup_v2_tree_stays_out_of_reach(local_sandbox):
    """Before: the same trick mounted the host's cgroup2 tree and made a cgroup there that
    stayed after the sandbox closed."""
    v2 = _cgroup2_root()
    if v2 is None:
        pytest.skip("no cgroup2 hierarchy on this host")
    name = f"sweflow-escape-{secrets.token_hex(6)}"
    before = {p for p in v2.rglob(name)}
    script = (
        "unshare -Urm -C sh -c 'mkdir -p /tmp/u && mount -t cgroup2 none /tmp/u && mkdir /tmp/u/%s'"
    )
    script %= name
    try:
        result = local_sandbox.exec(script, timeout=30)
        local_sandbox.close()
        made = {p for p in v2.rglob(name)} - before
        assert made == set() and result.exit_code != 0, result.output
    finally:
        for path in v2.rglob(name):
            path.rmdir()


def test_a_sandbox_cannot_make_cgroups_and_close_leaves_none(sandbox_spec):
    """Before: a child cgroup inside its own memory cgroup made close() fail ("stays busy"),
    losing the command's output and leaking the state directory and the cgroups."""
    _needs_v1("memory")
    sb = open_sandbox(sandbox_spec(limits={"memory_bytes": 128 * MB}))
    script = (
        "unshare -Urm -C sh -c 'mkdir -p /tmp/m && mount -t cgroup -o memory none /tmp/m && "
        "mkdir /tmp/m/child && echo $$ > /tmp/m/child/cgroup.procs && sleep 300' &"
        " sleep 1; echo done"
    )
    assert sb.exec(script, timeout=30).output.endswith("done\n")
    group = _cgroup_dir(sb, "memory")
    assert [p for p in group.iterdir() if p.is_dir()] == []
    sb.close()
    assert not group.exists() and not sb.dir.exists()


def test_close_removes_cgroups_made_below_the_sandboxs_own(sandbox_spec):
    """A cgroup below the sandbox's (made by a host tool, or by a sandbox given delegation) is
    emptied and removed by close, which never fails on it."""
    _needs_v1("pids")
    sb = open_sandbox(sandbox_spec(limits={"pids": 64}))
    sb.exec("sleep 300 >/dev/null 2>&1 &")
    group = _cgroup_dir(sb, "pids")
    child = group / "child" / "grandchild"
    child.mkdir(parents=True)
    sleeper = (group / "cgroup.procs").read_text().split()[-1]
    (child / "cgroup.procs").write_text(sleeper)
    sb.close()
    assert not group.exists() and not sb.dir.exists()
    assert not running(int(sleeper))
