"""Base-layer producers: real debootstrap, real docker (when a daemon runs), real tar files."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from sweflow.sandbox.mounts import mounts_under
from sweflow.sandbox.rootfs import (
    HOST_MASKED_PATHS,
    MARKER,
    SUITES,
    RootfsError,
    _build_once,
    debootstrap_rootfs,
    docker_image_rootfs,
    host_rootfs,
    resolve_base,
    rootfs_info,
)
from sweflow.sandbox.tarfiles import UnsafeArchiveError, safe_extract

IS_ROOT = os.geteuid() == 0


# --- debootstrap ------------------------------------------------------------------------------


def test_bookworm_rootfs_is_a_usable_debian(bookworm_rootfs: Path) -> None:
    info = rootfs_info(bookworm_rootfs)
    assert info is not None
    assert info["suite"] == "bookworm" and info["variant"] == "minbase"
    assert "python3" in info["include"] and "git" in info["include"]
    assert info["size_bytes"] > 50_000_000
    assert bookworm_rootfs.name.startswith("debian-bookworm-")
    for tool in ("usr/bin/python3", "usr/bin/git", "usr/bin/patch", "usr/bin/ps", "bin/bash"):
        assert (bookworm_rootfs / tool).exists(), tool
    for name in ("hostname", "hosts", "resolv.conf"):
        etc_file = bookworm_rootfs / "etc" / name
        assert etc_file.is_file() and not etc_file.is_symlink(), name
        assert etc_file.stat().st_size < 4096
    assert "127.0.0.1\tlocalhost" in (bookworm_rootfs / "etc/hosts").read_text()
    assert not list((bookworm_rootfs / "var/cache/apt/archives").glob("*.deb"))
    assert not [p for p in (bookworm_rootfs / "var/lib/apt/lists").iterdir() if p.is_file()]
    assert not bookworm_rootfs.with_name(bookworm_rootfs.name + ".tmp").exists()
    if IS_ROOT:
        script = "import sys, venv; print(sys.version)"
        done = subprocess.run(
            ["chroot", str(bookworm_rootfs), "python3", "-c", script],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("3.11")


def test_debootstrap_is_idempotent(bookworm_rootfs: Path) -> None:
    created = rootfs_info(bookworm_rootfs)["created"]
    lines: list[str] = []
    start = time.monotonic()
    again = debootstrap_rootfs("bookworm", bookworm_rootfs.parent, progress=lines.append)
    assert time.monotonic() - start < 2
    assert again == bookworm_rootfs
    assert rootfs_info(again)["created"] == created
    assert lines == []  # nothing was built, so nothing to report


def test_package_set_changes_the_key(bookworm_rootfs: Path, tmp_path: Path) -> None:
    # Same suite, other packages: another directory. The mirror is unreachable on purpose so
    # that the new build fails fast; its log's name shows the key it was building.
    with pytest.raises(RootfsError, match="full log: "):
        debootstrap_rootfs("bookworm", tmp_path, include=("python3",), mirror="http://127.0.0.1:9/")
    (log,) = tmp_path.glob("debian-bookworm-*.log")
    assert log.name.startswith("debian-bookworm-") and log.stem != bookworm_rootfs.name


def test_unsupported_suite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'sid'.*bullseye, bookworm, trixie"):
        debootstrap_rootfs("sid", tmp_path)
    assert not list(tmp_path.iterdir())


def test_missing_debootstrap_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(RootfsError, match="apt-get install debootstrap"):
        debootstrap_rootfs("bookworm", tmp_path / "cache")


@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="debootstrap is not installed")
def test_debootstrap_failure_names_the_log_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RootfsError) as caught:
        debootstrap_rootfs("bullseye", tmp_path, mirror="http://127.0.0.1:9/debian")
    message = str(caught.value)
    logs = list(tmp_path.glob("debian-bullseye-*.log"))
    assert len(logs) == 1 and str(logs[0]) in message
    assert "failed (exit" in message and "last lines:" in message
    assert "127.0.0.1:9" in logs[0].read_text()
    leftovers = [p for p in tmp_path.iterdir() if p.suffix not in (".log", ".lock")]
    assert leftovers == []


# --- resolve_base / host ----------------------------------------------------------------------


def test_resolve_base_dispatches(bookworm_rootfs: Path, tmp_path: Path) -> None:
    assert resolve_base("host", tmp_path) == host_rootfs() == Path("/")
    assert resolve_base("debian:bookworm", bookworm_rootfs.parent) == bookworm_rootfs
    assert resolve_base(str(bookworm_rootfs), tmp_path) == bookworm_rootfs
    assert resolve_base(str(tmp_path / "." / ""), tmp_path) == tmp_path.resolve()


@pytest.mark.parametrize("bad", ["", "ubuntu:jammy", "/no/such/dir", "docker:", "hosts"])
def test_resolve_base_rejects_unknown_names(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        resolve_base(bad, tmp_path)


def test_resolve_base_rejects_unknown_suite(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'buster'"):
        resolve_base("debian:buster", tmp_path)


def test_host_masked_paths() -> None:
    users_and_state = {"/root", "/home", "/tmp", "/run", "/var/tmp", "/mnt", "/media"}
    secrets = {"/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/ssl/private", "/var/lib/docker"}
    assert users_and_state | secrets <= set(HOST_MASKED_PATHS)


def test_rootfs_info_of_unbuilt_paths(tmp_path: Path) -> None:
    assert rootfs_info(tmp_path) is None
    assert rootfs_info(tmp_path / "missing") is None
    (tmp_path / "file").write_text("x")
    assert rootfs_info(tmp_path / "file") is None


# --- the build-once helper --------------------------------------------------------------------


def _write_hello(target: Path, _lock_fd: int) -> None:
    (target / "hello").write_text("hi\n")


def test_stale_temp_dir_is_removed_and_rebuilt(tmp_path: Path) -> None:
    final = tmp_path / "layer"
    stale = tmp_path / "layer.tmp"
    (stale / "etc").mkdir(parents=True)
    (stale / "half-written").write_text("junk")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    if IS_ROOT:  # what a killed debootstrap leaves behind: a mount inside the build dir
        (stale / "proc").mkdir()
        subprocess.run(["mount", "--bind", str(outside), str(stale / "proc")], check=True)
    lines: list[str] = []
    result = _build_once(final, {"kind": "test"}, _write_hello, lines.append)
    assert result == final
    assert (final / "hello").read_text() == "hi\n"
    assert not (final / "half-written").exists() and not stale.exists()
    assert (outside / "precious").read_text() == "keep me"
    assert not mounts_under(tmp_path)
    assert any("removing unfinished" in line for line in lines)
    info = rootfs_info(final)
    assert info["kind"] == "test" and info["size_bytes"] > 0 and "created" in info
    assert json.loads((final / MARKER).read_text()) == info


def test_final_dir_without_marker_is_rebuilt(tmp_path: Path) -> None:
    final = tmp_path / "layer"
    final.mkdir()
    (final / "leftover").write_text("x")
    _build_once(final, {"kind": "test"}, _write_hello, None)
    assert (final / "hello").exists() and not (final / "leftover").exists()


def test_interrupted_build_leaves_nothing_that_looks_done(tmp_path: Path) -> None:
    final = tmp_path / "layer"

    def interrupted(target: Path, _lock_fd: int) -> None:
        _write_hello(target, _lock_fd)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _build_once(final, {"kind": "test"}, interrupted, None)
    assert not final.exists() and not (tmp_path / "layer.tmp").exists()
    assert _build_once(final, {"kind": "test"}, _write_hello, None) == final


def _slow_counted_build(target: Path, _lock_fd: int) -> None:
    with open(target.parent / "builds.txt", "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    _write_hello(target, _lock_fd)


def _build_in_child(final: Path, results: multiprocessing.Queue) -> None:
    results.put(str(_build_once(final, {"kind": "test"}, _slow_counted_build, None)))


def test_concurrent_builders_build_once(tmp_path: Path) -> None:
    final = tmp_path / "layer"
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    children = [context.Process(target=_build_in_child, args=(final, results)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    assert sorted(results.get(timeout=5) for _ in children) == [str(final)] * 3
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1


def _build_leaving_an_orphan(target: Path, lock_fd: int) -> None:
    subprocess.Popen(["sleep", "3"], pass_fds=(lock_fd,))  # like debootstrap outliving us
    (target / "child-started").touch()
    time.sleep(60)


def test_lock_is_held_while_a_killed_builders_child_runs(tmp_path: Path) -> None:
    final = tmp_path / "layer"
    context = multiprocessing.get_context("fork")
    builder = context.Process(
        target=_build_once, args=(final, {"kind": "test"}, _build_leaving_an_orphan, None)
    )
    builder.start()
    deadline = time.monotonic() + 20
    while not (tmp_path / "layer.tmp" / "child-started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(builder.pid, signal.SIGKILL)  # no cleanup runs, the orphan keeps the lock
    builder.join()
    lines: list[str] = []
    start = time.monotonic()
    assert _build_once(final, {"kind": "test"}, _write_hello, lines.append) == final
    assert time.monotonic() - start > 1.5
    assert any("waiting for another process" in line for line in lines)
    assert (final / "hello").exists() and not (final / "child-started").exists()


# --- safe untar -------------------------------------------------------------------------------


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> tarfile.TarFile:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer, mode="r|")  # a stream, like docker's export


def _entry(name: str, kind: bytes = tarfile.REGTYPE, **attrs: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "/etc/evil", "..", "a/../evil"])
def test_untar_rejects_members_outside_dest(tmp_path: Path, name: str) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    kind = tarfile.DIRTYPE if name == ".." else tarfile.REGTYPE
    tar = _tar((_entry(name, kind), b"pwned" if kind == tarfile.REGTYPE else None))
    with pytest.raises(UnsafeArchiveError, match="unsafe archive member"):
        safe_extract(tar, dest)
    assert not (tmp_path / "evil").exists()


def test_untar_refuses_to_write_through_a_symlink(tmp_path: Path) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    tar = _tar(
        (_entry("escape", tarfile.SYMTYPE, linkname=str(outside)), None),
        (_entry("escape/evil"), b"pwned"),
    )
    with pytest.raises(UnsafeArchiveError, match="written through"):
        safe_extract(tar, dest)
    assert not (outside / "evil").exists()


def test_untar_replaces_a_symlink_instead_of_following_it(tmp_path: Path) -> None:
    dest, victim = tmp_path / "dest", tmp_path / "victim"
    dest.mkdir()
    victim.write_text("original")
    tar = _tar(
        (_entry("passwd", tarfile.SYMTYPE, linkname=str(victim)), None),
        (_entry("passwd"), b"replaced"),
    )
    safe_extract(tar, dest)
    assert victim.read_text() == "original"
    assert (dest / "passwd").read_text() == "replaced" and not (dest / "passwd").is_symlink()


def test_untar_rejects_hardlinks_outside_dest(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "secret").write_text("s")
    tar = _tar((_entry("link", tarfile.LNKTYPE, linkname="../secret"), None))
    with pytest.raises(UnsafeArchiveError, match="unsafe archive member"):
        safe_extract(tar, dest)
    assert not (dest / "link").exists()


def test_untar_keeps_links_modes_and_owners_and_drops_devices(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    tar = _tar(
        (_entry("usr", tarfile.DIRTYPE, mode=0o755), None),
        (_entry("usr/bin", tarfile.DIRTYPE, mode=0o555, mtime=1_000_000), None),
        (_entry("usr/bin/su", mode=0o4755, uid=0, gid=0), b"#!/bin/sh\n"),
        (_entry("usr/bin/tool", mode=0o750, uid=1234, gid=2345), b"tool"),
        (_entry("usr/bin/tool-again", tarfile.LNKTYPE, linkname="usr/bin/tool"), None),
        (_entry("bin", tarfile.SYMTYPE, linkname="usr/bin"), None),
        (_entry("sh", tarfile.SYMTYPE, linkname="/usr/bin/dash"), None),
        (_entry("dev", tarfile.DIRTYPE, mode=0o755), None),
        (_entry("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3), None),
        (_entry("dev/null-again", tarfile.LNKTYPE, linkname="dev/null"), None),
    )
    safe_extract(tar, dest)
    bin_dir = dest / "usr/bin"
    assert (bin_dir / "su").stat().st_mode & 0o7777 == 0o4755
    assert (bin_dir / "tool").stat().st_mode & 0o7777 == 0o750
    assert (bin_dir / "tool").stat().st_ino == (bin_dir / "tool-again").stat().st_ino
    assert os.readlink(dest / "bin") == "usr/bin"
    assert os.readlink(dest / "sh") == "/usr/bin/dash"  # kept as is: it resolves in the sandbox
    assert bin_dir.stat().st_mode & 0o7777 == 0o555 and bin_dir.stat().st_mtime == 1_000_000
    assert (dest / "dev").is_dir() and list((dest / "dev").iterdir()) == []
    if IS_ROOT:
        assert ((bin_dir / "tool").stat().st_uid, (bin_dir / "tool").stat().st_gid) == (1234, 2345)


# --- docker -----------------------------------------------------------------------------------


@pytest.fixture
def tiny_image(dockerd):  # type: ignore[no-untyped-def]
    """A three-file image made with `docker import`: no registry needed, gone afterwards."""
    client = dockerd
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in [
            (_entry("usr", tarfile.DIRTYPE, mode=0o755), None),
            (_entry("usr/bin", tarfile.DIRTYPE, mode=0o755), None),
            (_entry("usr/bin/su", mode=0o4755), b"#!/bin/sh\n"),
            (_entry("usr/bin/tool", mode=0o750, uid=1234, gid=2345), b"tool"),
            # a hard link entry repeats its file's metadata, as tar writes it: docker's import
            # applies the entry's owner and mode to the shared inode
            (
                _entry(
                    "usr/bin/tool-again",
                    tarfile.LNKTYPE,
                    linkname="usr/bin/tool",
                    mode=0o750,
                    uid=1234,
                    gid=2345,
                ),
                None,
            ),
            (_entry("bin", tarfile.SYMTYPE, linkname="usr/bin"), None),
            (_entry("etc", tarfile.DIRTYPE, mode=0o755), None),
            (_entry("etc/resolv.conf", tarfile.SYMTYPE, linkname="/run/resolv.conf"), None),
        ]:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    name = "sweflow-test/rootfs-tiny:latest"
    client.api.import_image_from_data(buffer.getvalue(), repository=name)
    yield client, name
    client.images.remove(name, force=True)


@pytest.mark.docker
def test_docker_image_rootfs(tiny_image, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client, name = tiny_image
    containers_before = len(client.containers.list(all=True))
    root = docker_image_rootfs(name, tmp_path, client=client)
    image_id = client.images.get(name).id
    assert root == tmp_path / f"image-{image_id.split(':')[1][:12]}"
    info = rootfs_info(root)
    assert info["image"] == name and info["image_id"] == image_id
    assert (root / "usr/bin/su").stat().st_mode & 0o7777 == 0o4755
    tool = (root / "usr/bin/tool").stat()
    assert tool.st_ino == (root / "usr/bin/tool-again").stat().st_ino
    if IS_ROOT:
        assert (tool.st_uid, tool.st_gid) == (1234, 2345)
    assert os.readlink(root / "bin") == "usr/bin"
    assert not (root / ".dockerenv").exists()
    for etc_name in ("hostname", "hosts", "resolv.conf"):
        assert (root / "etc" / etc_name).is_file() and not (root / "etc" / etc_name).is_symlink()
    assert len(client.containers.list(all=True)) == containers_before  # temp container removed
    assert docker_image_rootfs(name, tmp_path, client=client) == root
    assert rootfs_info(root)["created"] == info["created"]
    assert resolve_base(f"docker:{name}", tmp_path) == root


@pytest.mark.docker
def test_docker_missing_image_is_named(dockerd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = dockerd
    with pytest.raises(RootfsError, match="'sweflow-test/no-such-image:nope' not found locally"):
        docker_image_rootfs("sweflow-test/no-such-image:nope", tmp_path, client=client)


def test_suites_are_the_supported_ones() -> None:
    assert SUITES == ("bullseye", "bookworm", "trixie")
