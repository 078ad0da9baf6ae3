"""Base layers: plain directories that become the lowest (read-only) overlayfs layer of a sandbox.

Three producers: ``debootstrap_rootfs`` (a Debian suite, no docker needed), ``docker_image_rootfs``
(the filesystem of a local docker image) and ``host_rootfs`` (the host's own ``/``). Built layers
are content-keyed directories under a cache root; a directory counts as finished only when it
holds the marker file, and it only ever appears under its final name by an atomic rename, so an
interrupted build can never be mistaken for a finished one.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.errors import SweflowError
from sweflow.progress import Progress
from sweflow.sandbox.mounts import mounts_under
from sweflow.sandbox.tarfiles import ChunkReader, UnsafeArchiveError, safe_extract

if TYPE_CHECKING:
    import docker


SUITES: tuple[str, ...] = ("bullseye", "bookworm", "trixie")
DEFAULT_INCLUDE: tuple[str, ...] = (
    "python3",
    "python3-venv",
    "git",
    "ca-certificates",
    "bash",
    "procps",
    "patch",
    # the harnesses' base images have build-essential; recipes call make without installing
    # it (SWE-Gym's getmoto/moto installs by `make init`)
    "make",
)
MARKER = ".sweflow-rootfs.json"

# Host paths the sandbox runtime hides when the host root is the base layer (a directory behind
# an empty tmpfs, a file behind a read-only /dev/null): users' data, per-boot state and the
# secrets that root can read on the host, which a sandbox must neither see nor share.
HOST_MASKED_PATHS: tuple[str, ...] = (
    "/root",
    "/home",
    "/tmp",
    "/run",
    "/var/tmp",
    "/mnt",
    "/media",
    # root-only on the host, so root inside (not the host's root) cannot read them anyway;
    # masked too, as they were when root inside was the host's root
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/ssl/private",
    "/var/lib/docker",
    "/var/lib/containerd",
)

_LOG_TAIL_LINES = 30
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


class RootfsError(SweflowError):
    """A base layer could not be produced (the message says why and what to do)."""


class UnknownBaseError(RootfsError, ValueError):
    """A base-layer name or Debian suite that is not supported (a ValueError too)."""


def _say(progress: Progress | None, line: str) -> None:
    if progress is not None:
        progress(line)


def rootfs_info(path: Path | str) -> dict[str, Any] | None:
    """The metadata of a finished base layer, or ``None`` if ``path`` is not one."""
    try:
        return json.loads((Path(path) / MARKER).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def host_rootfs() -> Path:
    """The host's ``/``, used read-only as the lowest layer, as SWE-MiniSandbox does, but isolated.

    Nothing is copied, so it costs no disk and no build time, and the sandbox gets the host's
    toolchains. Unlike SWE-MiniSandbox the sandbox runtime (not this function) masks
    ``HOST_MASKED_PATHS`` (users' folders, shadow files, ssh host keys, private TLS keys,
    container stores), and writes land in the sandbox's upper
    layer, never on the host.
    """
    return Path("/")


def debootstrap_rootfs(
    suite: str,
    dest_root: Path,
    *,
    variant: str = "minbase",
    include: Sequence[str] = DEFAULT_INCLUDE,
    mirror: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """A Debian ``suite`` built by debootstrap under ``dest_root``, reused if already built.

    The directory name is keyed by everything that changes the result, so different package
    sets never share (or overwrite) a layer. Needs root and network access to the mirror.
    """
    if suite not in SUITES:
        raise UnknownBaseError(
            f"unsupported Debian suite {suite!r}; supported: {', '.join(SUITES)}"
        )
    packages = sorted(set(include))
    key = hashlib.sha256(json.dumps([suite, variant, packages, mirror]).encode()).hexdigest()
    final = Path(dest_root) / f"debian-{suite}-{key[:12]}"
    if rootfs_info(final) is not None:
        return final
    exe = shutil.which("debootstrap")
    if exe is None:
        raise RootfsError(
            "debootstrap is not installed (or not on PATH): run `apt-get install debootstrap`"
        )
    log_path = final.with_name(final.name + ".log")

    def build(target: Path, lock_fd: int) -> None:
        cmd = [exe, f"--variant={variant}", suite, str(target)]
        if packages:
            cmd.insert(2, f"--include={','.join(packages)}")
        if mirror is not None:
            cmd.append(mirror)
        _say(progress, f"debootstrap {suite} into {final} (log: {log_path})")
        rc = _run_logged(cmd, log_path, progress, lock_fd)
        if rc != 0:
            inner = target / "debootstrap" / "debootstrap.log"  # has the real error, if any
            if inner.is_file():
                with log_path.open("a") as log:
                    log.write(f"\n--- {inner} ---\n{inner.read_text(errors='replace')}")
            raise RootfsError(_debootstrap_failure(suite, rc, log_path, exe))
        clean_apt(target)

    meta = {
        "kind": "debian",
        "suite": suite,
        "variant": variant,
        "include": packages,
        "mirror": mirror,
    }
    return _build_once(final, meta, build, progress)


def docker_image_rootfs(
    image: str,
    dest_root: Path,
    *,
    client: docker.DockerClient | None = None,
    progress: Progress | None = None,
) -> Path:
    """The filesystem of the local docker ``image``, unpacked under ``dest_root``, reused if done.

    Keyed by image id, so a retagged image is not exported twice and a rebuilt one is not
    confused with the old one. The image is never run: a container is created, exported, removed.
    """
    try:
        import docker  # only this producer needs the docker SDK
    except ImportError:
        raise RootfsError("the docker SDK is missing: pip install 'sweflow[docker]'") from None
    try:
        client = client or docker.from_env()
        image_id = client.images.get(image).id
    except docker.errors.ImageNotFound:
        raise RootfsError(
            f"docker image {image!r} not found locally: pull, build or `docker import` it first"
        ) from None
    except docker.errors.DockerException as exc:
        raise RootfsError(f"cannot reach the docker daemon for {image!r}: {exc}") from exc
    final = Path(dest_root) / f"image-{image_id.split(':')[-1][:12]}"

    def build(target: Path, _lock_fd: int) -> None:
        _say(progress, f"exporting docker image {image} ({image_id}) into {final}")
        # An imported image may have no command; create() needs one even though it never runs.
        try:
            container = client.containers.create(
                image_id, command=["/bin/true"], network_disabled=True
            )
            try:
                stream = io.BufferedReader(ChunkReader(container.export()), buffer_size=1 << 20)
                with tarfile.open(fileobj=stream, mode="r|") as tar:
                    safe_extract(tar, target)
            finally:
                container.remove(force=True)
        except docker.errors.DockerException as exc:
            raise RootfsError(f"exporting docker image {image!r} failed: {exc}") from exc
        except UnsafeArchiveError as exc:
            raise RootfsError(str(exc)) from exc
        (target / ".dockerenv").unlink(missing_ok=True)  # added by the export, not in the image

    meta = {"kind": "docker", "image": image, "image_id": image_id}
    return _build_once(final, meta, build, progress)


def resolve_base(name: str, dest_root: Path, *, progress: Progress | None = None) -> Path:
    """Turn a base-layer name from a config or the CLI into a directory, building it if needed.

    Accepts ``host``, ``debian:SUITE``, ``docker:IMAGE`` or the path of an existing directory.
    """
    if name == "host":
        return host_rootfs()
    if name.startswith("debian:"):
        return debootstrap_rootfs(name.removeprefix("debian:"), dest_root, progress=progress)
    if name.startswith("docker:") and len(name) > len("docker:"):
        return docker_image_rootfs(name.removeprefix("docker:"), dest_root, progress=progress)
    if name and Path(name).is_dir():
        return Path(name).resolve()
    raise UnknownBaseError(
        f"unknown base layer {name!r}: expected 'host', 'debian:SUITE' "
        f"({', '.join(SUITES)}), 'docker:IMAGE' or an existing directory"
    )


def _build_once(
    final: Path,
    meta: dict[str, Any],
    build: Callable[[Path, int], None],
    progress: Progress | None,
) -> Path:
    """Build ``final`` at most once across processes: lock, build into a temporary sibling,
    write the marker last, then rename into place atomically.

    ``build(target, lock_fd)`` fills ``target``; it hands ``lock_fd`` to any child process
    it starts, so that the lock stays held while an orphaned child still writes into
    ``target`` after this process was killed.
    """
    if rootfs_info(final) is not None:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(final.name + ".tmp")
    with open(final.with_name(final.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(progress, f"waiting for another process building {final.name}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if rootfs_info(final) is not None:  # the other process finished it
            return final
        for stale in (tmp, final):  # leftovers of a crashed run; a final without marker is junk
            if os.path.lexists(stale):
                _say(progress, f"removing unfinished {stale}")
                _remove_tree(stale)
        tmp.mkdir(mode=0o755)
        try:
            build(tmp, lock.fileno())
            _ensure_etc_files(tmp)
            meta = {
                **meta,
                "created": datetime.now(UTC).isoformat(),
                "size_bytes": _tree_size(tmp),
            }
            (tmp / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
            os.rename(tmp, final)
        except BaseException:
            _remove_tree(tmp)
            raise
    _say(progress, f"base layer ready: {final} ({meta['size_bytes'] / 1e6:.0f} MB)")
    return final


def _run_logged(cmd: list[str], log_path: Path, progress: Progress | None, lock_fd: int) -> int:
    """Run ``cmd`` with its output in ``log_path``; debootstrap's status lines go to progress.

    The child inherits ``lock_fd`` (see ``_build_once``)."""
    with log_path.open("w") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            pass_fds=(lock_fd,),
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"},
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if line.startswith(("I:", "W:", "E:")):
                    _say(progress, line.rstrip())
            return proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def _debootstrap_failure(suite: str, rc: int, log_path: Path, exe: str) -> str:
    lines = log_path.read_text(errors="replace").splitlines()
    message = (
        f"debootstrap of {suite} failed (exit {rc}); full log: {log_path}\n"
        f"last lines:\n" + "\n".join(lines[-_LOG_TAIL_LINES:])
    )
    if suite == "trixie":
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        message += (
            f"\nnote: trixie may need a newer debootstrap than this one ({version.strip()}); "
            "bookworm's is often too old: install debootstrap from bookworm-backports or trixie"
        )
    return message


def clean_apt(root: Path) -> None:
    """Drop apt's downloaded packages, its binary caches and its index files from the tree at
    ``root``: ~100 MB a debootstrap, ~70 MB each ``apt-get install`` step, that a read-only
    layer never needs (apt rebuilds its caches, and a later install runs ``apt-get update``
    first, as every spec's does). Whiteouts (an upper deleting a lower's file) are kept."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"):
        for path in root.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()


def _ensure_etc_files(root: Path) -> None:
    """Give every layer a small regular /etc/hostname, /etc/hosts and /etc/resolv.conf.

    The sandbox runtime bind-mounts over them, which needs a file to exist; a symlink there
    (common in images) would otherwise point the mount, or this write, outside the layer.
    """
    etc = root / "etc"
    if etc.is_symlink():
        raise RootfsError(f"{etc} is a symlink; refusing to use this tree as a base layer")
    etc.mkdir(mode=0o755, exist_ok=True)
    resolv = etc / "resolv.conf"
    keep_resolv = resolv.is_file() and not resolv.is_symlink() and resolv.stat().st_size < 4096
    wanted = {"hostname": "sandbox\n", "hosts": _HOSTS}
    if not keep_resolv:
        wanted["resolv.conf"] = ""
    for name, text in wanted.items():
        path = etc / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)


def _tree_size(root: Path) -> int:
    """Bytes held by the files under ``root``, each hard-linked inode counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _remove_tree(path: Path) -> None:
    """Delete a build directory, first detaching whatever a killed debootstrap left mounted in
    it (its /proc, /sys, bind-mounted /dev): rmtree would otherwise delete through them."""
    for mount in mounts_under(os.path.realpath(path)):
        done = subprocess.run(["umount", "--lazy", mount], capture_output=True, text=True)
        if done.returncode != 0:
            raise RootfsError(f"cannot unmount {mount} before removing {path}: {done.stderr}")
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)
