"""The scratch backend's own behaviour: a copy of the layers on the host, a workdir it reports,
files confined to the copy, every process gone at close, and refusals where isolation is needed.
The protocol itself is checked in tests/sandbox/test_sandbox_contract.py."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path

import pytest
from conftest import tree_snapshot

from sweflow.instances import Instance
from sweflow.sandbox import (
    Bind,
    SandboxConfigError,
    SandboxFileError,
    SandboxSpec,
    open_sandbox,
)
from sweflow.sandbox.procs import running, start_ticks
from sweflow.sandbox.scratch import ScratchSandbox


@pytest.fixture(autouse=True)
def scratch_dir(tmp_path: Path, monkeypatch) -> Path:
    """A scratch folder of this test's own, so that gc and leftovers count only its sandboxes."""
    path = tmp_path / "scratch"
    monkeypatch.setenv("SWEFLOW_SCRATCH_DIR", str(path))
    return path


def test_the_layers_are_copied_and_the_workdir_is_where_the_copy_is(
    git_layer: Path, tmp_path: Path
) -> None:
    tools = tmp_path / "tools"
    (tools / "usr" / "bin").mkdir(parents=True)
    (tools / "usr" / "bin" / "hostname").write_text("#!/bin/sh\necho hostname of the layer\n")
    (tools / "usr" / "bin" / "hostname").chmod(0o755)
    before = tree_snapshot(git_layer)
    with open_sandbox(
        SandboxSpec(layers=[Path("/"), git_layer, tools], workdir="/testbed"), "scratch"
    ) as sb:
        wd = sb.spec.workdir
        assert wd == f"{sb.root}/testbed" and sb.exec("pwd").output == f"{wd}\n"
        assert sorted(os.listdir(sb.root)) == ["testbed", "usr"]  # the layers, not the host's /
        assert sb.exec("hostname").output == "hostname of the layer\n"  # the layer's goes first
        assert sb.exec("/usr/bin/hostname").output == f"{socket.gethostname()}\n"
        env = sb.exec("echo $HOME; echo $TMPDIR").output.split()
        assert env == [f"{sb.dir}/home", f"{sb.dir}/tmp"]
        assert sb.exec("echo changed > hello.py && git status --porcelain").output == (
            " M hello.py\n"
        )
        sb.write(f"{wd}/new.py", "x = 1\n")
        assert "+x = 1" in sb.diff() and "+changed" in sb.diff()
    assert tree_snapshot(git_layer) == before  # a copy: the layer is untouched


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts are device nodes: mknod needs root")
def test_layers_stack_as_overlayfs_stacks_them(tmp_path: Path) -> None:
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    for path, text in {"a/gone": "x", "a/kept": "x", "b/hidden": "x", "c": "file below"}.items():
        (lower / path).parent.mkdir(parents=True, exist_ok=True)
        (lower / path).write_text(text)
    (upper / "a").mkdir(parents=True)
    os.mknod(upper / "a" / "gone", stat.S_IFCHR, os.makedev(0, 0))  # a whiteout
    (upper / "b").mkdir()
    os.setxattr(upper / "b", "trusted.overlay.opaque", b"y")  # an opaque directory
    (upper / "b" / "new").write_text("y")
    (upper / "c").mkdir()  # a directory over a file
    (upper / "c" / "inside").write_text("y")
    with open_sandbox(SandboxSpec(layers=[lower, upper]), "scratch") as sb:
        tree = sb.exec("find a b c | sort").output.split()
    assert tree == ["a", "a/kept", "b", "b/new", "c", "c/inside"]


def test_files_outside_the_copy_are_refused(git_layer: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("the host's\n")
    with open_sandbox(SandboxSpec(layers=[git_layer], workdir="/testbed"), "scratch") as sb:
        wd = sb.spec.workdir
        assert sb.exec(f"ln -s {outside} leak && cat leak").output == "the host's\n"
        for path in (str(outside), f"{wd}/leak", f"{wd}/../../../outside.txt"):
            with pytest.raises(SandboxFileError, match="files are under"):
                sb.read(path)
            with pytest.raises(SandboxFileError, match="files are under"):
                sb.write(path, "overwritten\n")
        with pytest.raises(SandboxFileError, match="not a regular file"):
            sb.read(wd)
    assert outside.read_text() == "the host's\n"


def test_close_kills_every_process_the_sandbox_started(git_layer: Path, open_backend) -> None:
    """A background job, an orphan and a process in a session of its own (setsid), which a
    process-group kill would miss: the supervisor adopts orphans, so close finds them all."""
    sb = open_backend(SandboxSpec(layers=[git_layer], workdir="/testbed"), "scratch")
    started = sb.exec(
        "sleep 300 & echo $!; (sleep 301 & echo $!); setsid sleep 302 & echo $!; "
        "(setsid sleep 303 >/dev/null & echo $!)"
    )
    pids = [int(p) for p in started.output.split()]
    assert len(pids) == 4
    time.sleep(0.05)  # start times count in 10 ms ticks: a job of this tick would count as new
    timed = sb.exec("(setsid sleep 304 & echo $! >pid); sleep 60", timeout=1)
    assert timed.timed_out and not running(int(sb.read(f"{sb.spec.workdir}/pid")))
    ticks = {pid: start_ticks(pid) for pid in pids}
    assert all(running(pid, ticks[pid]) for pid in pids)
    directory = sb.dir
    sb.close()
    assert [pid for pid in pids if running(pid, ticks[pid])] == []
    assert not directory.exists()


def test_what_it_cannot_do_is_refused_and_leaves_nothing(
    git_layer: Path, tmp_path: Path, scratch_dir: Path
) -> None:
    fifo_layer = tmp_path / "fifo-layer"
    fifo_layer.mkdir()
    os.mkfifo(fifo_layer / "pipe")
    for spec, words in (
        (SandboxSpec(layers=[git_layer], binds=[Bind(source=tmp_path, target="/x")]), "bind"),
        (SandboxSpec(layers=[git_layer], upper="disk", upper_dir=tmp_path / "u"), "upper"),
        (SandboxSpec(layers=[tmp_path / "missing"]), "not a directory"),
        (SandboxSpec(layers=[git_layer, fifo_layer]), "a fifo"),
    ):
        with pytest.raises(SandboxConfigError, match=words):
            open_sandbox(spec, "scratch")
    assert not scratch_dir.exists() or list(scratch_dir.iterdir()) == []


def test_gc_removes_what_a_dead_owner_left_and_keeps_the_live(
    git_layer: Path, scratch_dir: Path
) -> None:
    with open_sandbox(SandboxSpec(layers=[git_layer]), "scratch") as live:
        dead = scratch_dir / "0123456789abcdef-dead"
        (dead / "root").mkdir(parents=True)
        owner = f"{socket.gethostname()}:999999999:1"  # a pid no process has
        (dead / "owner.json").write_text(json.dumps({"owner": owner}))
        assert ScratchSandbox.collect_garbage() == {"directories removed": 1}
        assert not dead.exists() and live.dir.is_dir()
        assert live.exec("true").ok


def test_rl_refuses_a_backend_that_isolates_nothing(tmp_path: Path) -> None:
    from sweflow.agent.config import AgentConfig
    from sweflow.training.rl.backend import RLError
    from sweflow.training.rl.config import RLConfig
    from sweflow.training.rl.trainer import train

    task = Instance(
        instance_id="demo__x-1", repo="demo/x", base_commit="HEAD", problem_statement="fix it"
    )
    with pytest.raises(RLError, match="'scratch' isolates nothing"):
        train(
            [task],
            tmp_path / "policy",
            tmp_path / "work",
            tmp_path / "out",
            RLConfig(),
            store=tmp_path / "store",
            specs=tmp_path / "specs.yaml",
            agent=AgentConfig(),
            backend="scratch",
        )
    assert not (tmp_path / "work").exists()
