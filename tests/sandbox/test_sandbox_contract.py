"""The Sandbox protocol, checked the same way on every registered backend.

Each test runs once per name in ``sweflow.sandbox.BACKENDS``; a new backend joins the suite by
registering its name (and, if it needs a service, an entry in ``SERVICES`` naming the fixture
that starts it or skips). Backend-specific behaviour (layers as images, cgroups, rootless, docker's
container restarts) stays in the backend's own test file.

The base spec is the bookworm rootfs plus a layer holding a one-commit git repository at
/testbed, so exec, files, diff and timeouts are exercised on a real repository. A backend that
isolates nothing (``scratch``: ``Sandbox.isolated`` is False) runs on the host's own files: its
spec is the repository layer alone, its workdir the host path its ``spec.workdir`` reports, and
the tests of a root, hostname and network of the sandbox's own skip for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import spec_for

from sweflow.sandbox import (
    BACKENDS,
    Limits,
    SandboxCrashError,
    SandboxError,
    SandboxFileError,
    SandboxSpec,
    backend_class,
)

pytestmark = pytest.mark.timeout(300)


# The fixture that starts (or skips without) the service a backend needs, by backend name.
SERVICES = {"docker": "dockerd", "e2b": "e2b_endpoint"}


@pytest.fixture(scope="module")
def repo_layer(tmp_path_factory) -> Path:
    """A layer with a git repository at /testbed (one commit: hello.py, README.md)."""
    layer = tmp_path_factory.mktemp("contract-layer")
    repo = layer / "testbed"
    repo.mkdir()
    (repo / "hello.py").write_text("def hello():\n    return 'hello'\n")
    (repo / "README.md").write_text("# demo\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return layer


def _param(name: str):
    """The backend's runs leave the quick tier when it isolates (a rootfs, namespaces or a
    service: see tests/conftest.py)."""
    try:
        isolated = backend_class(name).isolated
    except SandboxError:  # its SDK is missing: its runs skip, and are not quick either
        isolated = True
    return pytest.param(name, marks=[pytest.mark.isolating] if isolated else [])


@pytest.fixture(params=[_param(name) for name in BACKENDS])
def backend(request) -> str:
    if request.param in SERVICES:
        request.getfixturevalue(SERVICES[request.param])
    return request.param


@pytest.fixture
def make(request, backend, repo_layer, open_backend):
    """``make(**limits)`` opens a sandbox of the backend under test; all are closed afterwards."""
    if not backend_class(backend).isolated:  # the host's files are its base
        return lambda **limits: open_backend(
            SandboxSpec(layers=[repo_layer], workdir="/testbed", limits=Limits(**limits)), backend
        )
    rootfs = request.getfixturevalue("bookworm_rootfs")
    return lambda **limits: open_backend(spec_for(rootfs, repo_layer, limits=limits), backend)


@pytest.fixture
def own_root(backend) -> None:
    """Skips a test of what only an isolating backend has: a root, hostname, network its own."""
    if not backend_class(backend).isolated:
        pytest.skip(f"{backend} isolates nothing: its files, hostname and network are the host's")


@pytest.fixture
def sb(make):
    return make()


# -- exec: exit codes, output, shell state ---------------------------------------------------------
def test_exit_codes_and_merged_output(sb) -> None:
    assert sb.exec("true").exit_code == 0 and sb.exec("true").ok
    assert sb.exec("false").exit_code == 1 and not sb.exec("false").ok
    assert sb.exec("(exit 7)").exit_code == 7
    assert sb.exec("sh -c 'exit 42'").exit_code == 42
    missing = sb.exec("no-such-command-xyz")
    assert missing.exit_code == 127 and "not found" in missing.output
    result = sb.exec("echo out1; echo err1 >&2; echo out2; echo err2 1>&2")
    assert result.output == "out1\nerr1\nout2\nerr2\n"
    assert result.ok and not result.timed_out and not result.truncated
    assert result.duration_s >= 0


def test_shell_state_persists_and_per_call_cwd_env_do_not(sb) -> None:
    assert sb.exec("pwd").output == f"{sb.spec.workdir}\n"
    assert sb.exec("cd /etc && export FOO=bar && BAZ=qux && greet() { echo hi-$1; }").ok
    assert sb.exec("pwd; echo $FOO $BAZ; greet you").output == "/etc\nbar qux\nhi-you\n"
    assert sb.exec("sh -c 'echo ${FOO:-none} ${BAZ:-none}'").output == "bar none\n"
    one_off = sb.exec("pwd; echo $ONE $FOO", cwd="/usr", env={"ONE": "1", "FOO": "inner value"})
    assert one_off.output == "/usr\n1 inner value\n"
    assert sb.exec("cd / && export LEAK=1", cwd="/tmp").ok
    assert sb.exec("pwd; echo ${LEAK:-no} $FOO").output == "/etc\nno bar\n"
    quoted = sb.exec("printf '%s\\n' \"$V\"", env={"V": "a 'b' \"c\" $d"})
    assert quoted.output == "a 'b' \"c\" $d\n"
    assert not sb.exec("pwd", cwd="/does/not/exist").ok
    with pytest.raises(SandboxError, match="invalid environment variable"):
        sb.exec("true", env={"BAD-NAME": "1"})


def test_exit_builtin_returns_its_code_and_the_shell_comes_back(sb) -> None:
    assert sb.exec("cd /opt && export AFTER_EXIT=kept").ok
    result = sb.exec("echo bye; exit 3")
    assert result.exit_code == 3 and "bye" in result.output and not result.timed_out
    assert sb.exec("echo alive; pwd; echo $AFTER_EXIT").output == "alive\n/opt\nkept\n"
    assert sb.exec("exit").exit_code == 0
    assert sb.exec("echo ok").output == "ok\n"


# -- timeouts -------------------------------------------------------------------------------------
def test_timeout_kills_the_command_and_spares_earlier_background_jobs(sb) -> None:
    # sleeps of this test's own lengths: on a backend that isolates nothing, ps lists the host's
    keep, orphan, child = (f"sleep {s}.{random.randrange(10**6):06d}" for s in (300, 1000, 999))
    assert sb.exec(f"cd /tmp; export KEEP=1; {keep} &").ok
    time.sleep(0.05)  # start times count in 10 ms ticks: a job of this tick would count as new
    started = time.monotonic()
    result = sb.exec(f"({orphan} &); {child}", timeout=1)  # an orphan and a child
    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code == 124 and not result.ok
    assert 0.9 <= elapsed < 15, elapsed
    after = sb.exec("pwd; echo $KEEP; ps -eo args")
    assert "/tmp\n1\n" in after.output, after  # (bash may first report a killed job)
    assert keep in after.output
    assert child not in after.output and orphan not in after.output


def test_timeout_of_a_builtin_loop_restores_shell_state(sb) -> None:
    assert sb.exec("cd /var/log && export KEEP_ME=yes").ok
    started = time.monotonic()
    result = sb.exec("while :; do :; done", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 15
    assert sb.exec("pwd; echo $KEEP_ME").output == "/var/log\nyes\n"


# -- output ---------------------------------------------------------------------------------------
def test_output_cap_truncates_and_flags(make) -> None:
    sb = make(output_bytes=1000)
    result = sb.exec("seq 1 100000")
    assert result.ok and result.truncated and len(result.output) < 1200
    assert result.output.startswith("1\n2\n3\n") and result.output.endswith("99999\n100000\n")
    assert "truncated" in result.output
    small = sb.exec("seq 1 10")
    assert not small.truncated and small.output == "".join(f"{i}\n" for i in range(1, 11))
    per_call = sb.exec("seq 1 1000", max_output=100)
    assert per_call.truncated and len(per_call.output) < 200


def test_binary_output_is_decoded_leniently(sb) -> None:
    assert sb.exec("printf 'a\\0b\\377c'").output == "a\x00b\ufffdc"
    noise = sb.exec("head -c 300000 /dev/urandom")
    assert noise.ok and isinstance(noise.output, str) and len(noise.output) > 100000
    assert sb.exec("echo fine").output == "fine\n"


# -- files ----------------------------------------------------------------------------------------
def test_read_write_round_trip(sb) -> None:
    wd = sb.spec.workdir
    sb.write(f"{wd}/new/deep/dir/file.txt", "héllo\n")
    assert sb.read(f"{wd}/new/deep/dir/file.txt") == "héllo\n".encode()
    assert sb.exec("cat new/deep/dir/file.txt").output == "héllo\n"
    blob = bytes(range(256)) * 4096 + b"\x00tail"
    sb.write(f"{wd}/blob.bin", blob)
    assert sb.read(f"{wd}/blob.bin") == blob
    assert sb.exec("sha256sum blob.bin").output.split()[0] == hashlib.sha256(blob).hexdigest()
    sb.write(f"{wd}/blob.bin", b"")  # replaced, not merged; empty is fine
    assert sb.read(f"{wd}/blob.bin") == b""
    sb.write(f"{wd}/hello.py", "changed\n")  # a lower-layer file
    assert sb.exec("cat hello.py").output == "changed\n"
    for path in (f"{wd}/missing", wd):  # missing, a directory
        with pytest.raises(SandboxFileError):
            sb.read(path)
    with pytest.raises(SandboxError, match="absolute"):
        sb.read("relative/path")
    with pytest.raises(SandboxError):
        sb.write(f"{wd}/", "x")


def test_the_root_hostname_and_links_are_the_sandboxs_own(sb, own_root) -> None:
    sb.write("/tmp/blob.bin", b"\x00tmp")
    assert sb.read("/tmp/blob.bin") == b"\x00tmp"
    sb.write("/etc/hostname", "changed\n")  # a file of the base layer
    assert sb.exec("cat /etc/hostname").output == "changed\n"
    assert sb.exec("ln -s /etc/app.conf /testbed/abs && ln -s ../etc/rel.conf /testbed/rel").ok
    sb.write("/testbed/abs", "via absolute link\n")  # links resolve inside, as for the shell
    sb.write("/testbed/rel", "via relative link\n")
    assert sb.exec("cat /etc/app.conf /etc/rel.conf").output == (
        "via absolute link\nvia relative link\n"
    )
    assert sb.exec("hostname").output == "sandbox\n"


def test_diff_has_text_changes_and_new_files_not_binaries(sb, repo_layer) -> None:
    assert sb.diff() == ""
    assert sb.exec("sed -i \"s/'hello'/'hello, world'/\" hello.py").ok
    sb.write(f"{sb.spec.workdir}/new_module.py", "VALUE = 42\n")
    sb.write(f"{sb.spec.workdir}/data.bin", b"\x00\x01\x02binary\xff" * 100)
    patch = sb.diff()
    assert "diff --git a/hello.py b/hello.py" in patch
    assert "-    return 'hello'" in patch and "+    return 'hello, world'" in patch
    assert "new_module.py" in patch and "+VALUE = 42" in patch
    assert "data.bin" not in patch
    assert sb.exec("git status --porcelain").output.count("??") == 2  # the index is untouched
    check = subprocess.run(
        ["git", "apply", "--check", "-"],
        input=patch.encode(),
        cwd=repo_layer / "testbed",
        capture_output=True,
    )
    assert check.returncode == 0, check.stderr


# -- lifecycle, isolation, asyncio -----------------------------------------------------------------
def test_close_is_idempotent_and_a_closed_sandbox_refuses(make) -> None:
    sb = make()
    with sb:
        assert sb.exec("echo in").output == "in\n"
    sb.close()
    for call in (
        lambda: sb.exec("true"),
        lambda: sb.read("/etc/hostname"),
        lambda: sb.write("/tmp/x", "x"),
    ):
        with pytest.raises(SandboxCrashError, match="closed"):
            call()


def test_close_interrupts_a_running_exec(make) -> None:
    sb = make()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sb.exec("sleep 60")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)
    started = time.monotonic()
    sb.close()
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - started < 20
    assert len(errors) == 1 and isinstance(errors[0], SandboxCrashError), errors


def test_network_is_off(sb, own_root) -> None:
    probe = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"
    result = sb.exec(f'python3 -c "{probe}"', timeout=30)
    assert result.exit_code != 0 and not result.timed_out
    assert sb.exec("ls /sys/class/net").output.split() == ["lo"]


def test_asyncio_use(make) -> None:
    sandboxes = [make() for _ in range(3)]

    async def main() -> tuple[list[str], float, bytes]:
        started = time.monotonic()
        results = await asyncio.gather(
            *(sb.aexec(f"sleep 1; echo sandbox-{i}") for i, sb in enumerate(sandboxes))
        )
        elapsed = time.monotonic() - started
        async with sandboxes[0] as sb:
            await sb.awrite(f"{sb.spec.workdir}/a.txt", "async")
            data = await sb.aread(f"{sb.spec.workdir}/a.txt")
            assert (await sb.aexec("cat a.txt")).output == "async"
            assert "a.txt" in await sb.adiff()
        with pytest.raises(SandboxCrashError):
            await sb.aexec("true")
        return [r.output for r in results], elapsed, data

    outputs, elapsed, data = asyncio.run(main())
    assert outputs == [f"sandbox-{i}\n" for i in range(3)]
    assert elapsed < 3.5, f"3 x 1 s commands took {elapsed:.1f} s: not concurrent"
    assert data == b"async"
