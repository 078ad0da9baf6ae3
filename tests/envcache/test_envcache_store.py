"""The layer store end to end: uppers written by real sandboxes, real squashfs/erofs images,
loop mounts used as lower layers by real sandboxes. No mocks."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import hand_upper

from sweflow.envcache.cleanup import gc, store_usage
from sweflow.envcache.store import LayerStore, StoreError
from sweflow.envcache.treedigest import tree_digest
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.rootfs import MARKER

pytestmark = pytest.mark.timeout(300)

# what test_commit's and test_packed_layer's sandboxes do to the bookworm rootfs
CHANGES = """set -e
echo new > /root/new.txt
echo changed >> /etc/issue
rm /etc/debian_version
rm -rf /usr/share/doc/git && mkdir /usr/share/doc/git && echo mine > /usr/share/doc/git/only
mkdir -p /testbed && echo 'x = 1' > /testbed/a.py && chmod 750 /testbed/a.py
"""
CHECK = """set -e
test "$(cat /root/new.txt)" = new
tail -n1 /etc/issue | grep -qx changed
test ! -e /etc/debian_version
test "$(ls -A /usr/share/doc/git)" = only
test "$(stat -c %a /testbed/a.py)" = 750
echo checked
"""
BUILD_ONLY = ("user.overlay.uuid", "user.overlay.origin", "user.overlay.impure")


def can_mount(fmt: str) -> bool:
    fuse = {"squashfs": "squashfuse", "erofs": "erofsfuse"}[fmt]
    return os.geteuid() == 0 or shutil.which(fuse) is not None


@pytest.fixture
def store(tmp_path: Path):
    store = LayerStore(tmp_path / "store")
    yield store
    for point in store.mnt.iterdir():  # what a failed test left mounted
        if os.path.ismount(point):
            subprocess.run(["umount", "--lazy", str(point)], check=False)


def sandbox_upper(store: LayerStore, layers: list[Path], script: str) -> Path:
    """An upper written by a sandbox running ``script`` on ``layers`` (closed when returned)."""
    upper = store.new_upper()
    with open_sandbox(SandboxSpec(layers=layers, upper="disk", upper_dir=upper)) as sb:
        result = sb.exec(script)
        assert result.ok, result.output
    return upper


def run(layers: list[Path], script: str) -> str:
    with open_sandbox(SandboxSpec(layers=layers)) as sb:
        result = sb.exec(script)
    assert result.ok, result.output
    return result.output


def all_xattrs(root: Path) -> set[str]:
    names = set(os.listxattr(root))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            names.update(os.listxattr(os.path.join(dirpath, name), follow_symlinks=False))
    return names


# -- commit -----------------------------------------------------------------------------------


def test_commit_of_a_sandbox_upper(store, bookworm_rootfs):
    upper = sandbox_upper(store, [bookworm_rootfs], CHANGES)
    assert "user.overlay.uuid" in os.listxattr(upper)  # what overlayfs left there

    layer = store.commit(upper, "instance")

    assert layer.path == store.layers / layer.digest and layer.kind == "instance"
    assert not upper.exists() and list(store.tmp.iterdir()) == []
    tree = layer.path
    assert (tree / "root/new.txt").read_text() == "new\n"
    whiteout = os.lstat(tree / "etc/debian_version")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == os.makedev(0, 0)
    assert os.getxattr(tree / "usr/share/doc/git", "user.overlay.opaque") == b"y"
    assert not all_xattrs(tree) & set(BUILD_ONLY)
    assert tree_digest(tree).digest == layer.digest  # stripping did not change what was digested
    assert (store.layers / f"{layer.digest}.json").is_file()
    assert (
        layer.size_bytes
        == sum(
            (tree / p).stat().st_size
            for p in ("root/new.txt", "etc/issue", "usr/share/doc/git/only")
        )
        + (tree / "testbed/a.py").stat().st_size
    )

    assert run([bookworm_rootfs, layer.path], CHECK).strip() == "checked"


def test_identical_uppers_are_stored_once(store, bookworm_rootfs):
    first = store.commit(sandbox_upper(store, [bookworm_rootfs], CHANGES), "instance")
    time.sleep(1.1)  # other mtimes, another overlay mount uuid
    upper = sandbox_upper(store, [bookworm_rootfs], CHANGES)
    second = store.commit(upper, "instance")

    assert second.digest == first.digest
    assert not upper.exists() and list(store.tmp.iterdir()) == []
    assert sorted(p.name for p in store.layers.iterdir()) == sorted(
        [first.digest, f"{first.digest}.json"]
    )


def make_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/mod.py").write_text("x = 1\n")
    (root / "pkg/big.bin").write_bytes(bytes(range(256)) * 5000)
    os.link(root / "pkg/mod.py", root / "pkg/alias.py")
    os.symlink("mod.py", root / "pkg/link.py")
    for path in (root, root / "pkg"):
        os.chmod(path, 0o755)
    for path in (root / "pkg/mod.py", root / "pkg/big.bin"):
        os.chmod(path, 0o644)


def test_digest_is_about_content_not_mtimes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_tree(a)
    time.sleep(0.01)
    make_tree(b)
    for dirpath, dirnames, filenames in os.walk(b):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (1e9, 1e9), follow_symlinks=False)
    base = tree_digest(a).digest
    assert tree_digest(b).digest == base
    assert tree_digest(b, workers=1).digest == base

    os.setxattr(b / "pkg", "user.overlay.uuid", b"per-mount noise")
    assert tree_digest(b).digest == base

    changes = [
        lambda: os.chmod(b / "pkg/mod.py", 0o755),
        lambda: (b / "pkg/big.bin").write_bytes(b"other"),
        lambda: ((b / "pkg/link.py").unlink(), os.symlink("big.bin", b / "pkg/link.py")),
        lambda: os.setxattr(b / "pkg", "user.overlay.opaque", b"y"),
        lambda: ((b / "pkg/alias.py").unlink(), (b / "pkg/alias.py").write_text("x = 1\n")),
        lambda: (b / "pkg/new").mkdir(),
    ]
    for change in changes:
        shutil.rmtree(b)
        make_tree(b)
        change()
        assert tree_digest(b).digest != base


def test_digest_speed_on_the_rootfs(bookworm_rootfs):
    first = tree_digest(bookworm_rootfs)
    again = tree_digest(bookworm_rootfs)
    print(
        f"rootfs digest: {first.entries} entries, {first.size_bytes / 1e6:.0f} MB, "
        f"{first.seconds:.2f} s cold-ish, {again.seconds:.2f} s warm"
    )
    assert again.digest == first.digest
    assert again.seconds < 30


# -- import, manifests, usage -----------------------------------------------------------------


def test_import_dir_references_the_rootfs(store, bookworm_rootfs, tmp_path):
    started = time.monotonic()
    base = store.import_dir(bookworm_rootfs, "base")
    assert time.monotonic() - started < 1.0  # the marker's digest, not the tree's
    link = store.layers / base.digest
    assert link.is_symlink() and link.resolve() == bookworm_rootfs.resolve()
    assert store.import_dir(bookworm_rootfs, "base").digest == base.digest
    inst = store.commit(hand_upper(store, {"testbed/a.py": b"print(1)\n"}), "instance")
    manifest = store.write_manifest("demo__demo-1", [base, inst])

    assert "print(1)" in run(store.layer_paths(manifest), "cat /testbed/a.py; python3 -V")
    usage = store_usage(store)
    assert usage.layers[base.digest].external and usage.layers[base.digest].disk_bytes == 0
    assert usage.external_bytes == base.size_bytes > 100e6
    assert gc(store).layers == []

    report = gc(store, keep_instances=set())
    assert set(report.layers) == {base.digest, inst.digest}
    assert not os.path.lexists(link) and (bookworm_rootfs / MARKER).is_file()

    host = store.import_dir(Path("/"))
    assert host.path.resolve() == Path("/") and host.size_bytes == 0
    plain = tmp_path / "plain"  # no marker: digested by content
    make_tree(plain)
    layer = store.import_dir(plain, "python")
    assert layer.digest == tree_digest(plain).digest and layer.path.resolve() == plain


def test_manifest_round_trip_and_has_instance(store):
    env = store.commit(hand_upper(store, {"opt/venv/lib/x.py": b"x = 1\n"}), "env")
    inst = store.commit(hand_upper(store, {"testbed/a.py": b"a = 1\n"}), "instance")
    meta = {"spec_digest": "abc123", "build_s": 1.5, "env": {"PATH": "/opt/venv/bin"}}

    written = store.write_manifest("owner__repo-1", [env, inst], meta)
    read = store.read_manifest("owner__repo-1")
    assert read == written and read.meta == meta
    assert [layer.kind for layer in read.layers] == ["env", "instance"]
    assert store.layer_paths(read) == [store.layers / env.digest, store.layers / inst.digest]
    assert store.has_instance("owner__repo-1") and not store.has_instance("owner__repo-2")
    assert store.read_manifest("owner__repo-2") is None
    got = store.get_layer(env.digest)
    assert (got.kind, got.size_bytes, got.path) == ("env", 6, store.layers / env.digest)
    assert store.get_layer("0" * 64) is None

    with pytest.raises(StoreError, match="not in the store"):
        store.write_manifest("owner__repo-3", [env, inst.model_copy(update={"digest": "f" * 64})])
    with pytest.raises(StoreError, match="invalid instance id"):
        store.write_manifest("../escape", [env])

    shutil.rmtree(store.layers / inst.digest)
    assert not store.has_instance("owner__repo-1")


def test_has_instance_is_cheap(store):
    layer = store.commit(hand_upper(store, {"a": b"a"}), "instance")
    for i in range(50):
        store.write_manifest(f"repo__repo-{i}", [layer])
    started = time.monotonic()
    assert all(store.has_instance(f"repo__repo-{i}") for i in range(50))
    assert time.monotonic() - started < 0.5


def test_usage_counts_hard_links_once_and_shared_layers_once(store):
    upper = hand_upper(store, {"data": b"d" * 1000, "small": b"s" * 10})
    os.link(upper / "data", upper / "data-link")
    os.symlink("data", upper / "sym")  # 4 bytes
    shared = store.commit(upper, "env")
    own = store.commit(hand_upper(store, {"testbed/x": b"x" * 500}), "instance")
    store.write_manifest("i1", [shared, own])
    store.write_manifest("i2", [shared])

    usage = store_usage(store)
    assert shared.size_bytes == 1014 and own.size_bytes == 500
    assert usage.layers[shared.digest].size_bytes == 1014
    assert usage.instances == {"i1": 1514, "i2": 1014}
    assert usage.total_bytes == 1514 and usage.external_bytes == 0
    assert usage.store_bytes_per_instance == 757


# -- gc and concurrency -----------------------------------------------------------------------


def test_gc_keeps_what_manifests_reference(store):
    a = store.commit(hand_upper(store, {"a": b"a" * 100}), "env")
    b = store.commit(hand_upper(store, {"b": b"b" * 200}), "instance")
    c = store.commit(hand_upper(store, {"c": b"c" * 300}), "instance")
    store.write_manifest("i1", [a])
    store.write_manifest("i2", [a, b])
    live = store.new_upper()
    dead = store.tmp / "upper-999999999-1-deadbeef"  # a pid that cannot exist
    (dead / "upper").mkdir(parents=True)
    (dead / "upper/f").write_bytes(b"x" * 50)
    old, fresh = store.tmp / "junk-old", store.tmp / "junk-fresh"
    old.write_bytes(b"y" * 7)
    fresh.write_bytes(b"z")
    os.utime(old, (time.time() - 7200, time.time() - 7200))

    report = gc(store)
    assert report.layers == [c.digest] and report.manifests == []
    assert sorted(report.tmp) == sorted([dead.name, old.name])
    assert report.freed_bytes == 300 + 50 + 7
    assert live.is_dir() and fresh.exists()
    assert store.has_instance("i1") and store.has_instance("i2")
    assert not (store.layers / f"{c.digest}.json").exists()

    report = gc(store, keep_instances={"i1"})
    assert report.manifests == ["i2"] and report.layers == [b.digest]
    assert store.has_instance("i1") and store.read_manifest("i2") is None


def test_concurrent_commits_of_the_same_content(store):
    uppers = [hand_upper(store, {"testbed/a.py": b"a = 1\n"}) for _ in range(6)]
    barrier = threading.Barrier(len(uppers))
    digests: list[str] = []

    def commit(upper: Path) -> None:
        barrier.wait()
        digests.append(store.commit(upper, "instance").digest)

    threads = [threading.Thread(target=commit, args=(upper,)) for upper in uppers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(digests) == len(uppers) and len(set(digests)) == 1
    assert len([p for p in store.layers.iterdir() if p.is_dir()]) == 1
    assert list(store.tmp.iterdir()) == []


def test_gc_waits_for_a_holder(store):
    done = threading.Event()
    with store.hold():
        worker = threading.Thread(target=lambda: (gc(store), done.set()))
        worker.start()
        time.sleep(0.3)
        assert not done.is_set()
    worker.join(10)
    assert done.is_set()


# -- packing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["squashfs", "erofs"])
def test_packed_layer_is_a_lower_and_keeps_whiteouts(store, bookworm_rootfs, fmt):
    if not can_mount(fmt):
        pytest.skip(f"mounting {fmt} needs root or its FUSE driver")
    layer = store.commit(sandbox_upper(store, [bookworm_rootfs], CHANGES), "instance")
    base = store.import_dir(bookworm_rootfs)
    store.write_manifest("demo__demo-1", [base, layer])

    image = store.pack(layer.digest, fmt, keep_dir=False)
    assert image.is_file() and not (store.layers / layer.digest).exists()
    assert store.has_instance("demo__demo-1")
    path = store.layer_path(layer.digest)
    assert path == store.mnt / layer.digest and os.path.ismount(path)
    assert store.layer_path(layer.digest) == path  # mounted once
    assert os.getxattr(path / "usr/share/doc/git", "user.overlay.opaque") == b"y"
    assert os.lstat(path / "etc/debian_version").st_rdev == os.makedev(0, 0)
    assert tree_digest(path).digest == layer.digest  # the image holds exactly the layer
    usage = store_usage(store).layers[layer.digest]
    assert usage.disk_bytes == usage.packed_bytes == image.stat().st_size

    manifest = store.read_manifest("demo__demo-1")
    assert run(store.layer_paths(manifest), CHECK).strip() == "checked"

    report = gc(store, keep_instances=set())
    assert report.unmounted == report.packed == [layer.digest]
    assert sorted(report.layers) == sorted([layer.digest, base.digest])
    assert not image.exists() and not path.exists()


# A store's records written in a fresh process: a layer (its sidecar), a manifest, a lease, a
# dataset, an environment's ref.
WRITE_RECORDS = """
import sys
from pathlib import Path
from sweflow.envcache import leases
from sweflow.envcache.store import LayerStore
from sweflow.instances import Instance, write_jsonl
store = LayerStore(Path(sys.argv[1]))
upper = store.new_upper()
(upper / "f").write_text("x")
layer = store.commit(upper, "env")
leases.take(store, store.write_manifest("i1", [layer]))
write_jsonl([Instance(instance_id="i1", repo="o/n", base_commit="0" * 40)], store.root / "t.jsonl")
"""
_CALL = re.compile(r"^(?:\[pid +\d+\] )?(\w+)\((.*)\) += 0$")


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_every_record_is_synced_before_and_after_it_appears(tmp_path: Path) -> None:
    """The store's atomic writes never fsynced (issue 54): after a power cut a manifest or a
    lease could be an empty file, or gone although its layers were kept for it. Seen with
    strace: each record's staged file is synced before its rename (or link), its folder after."""
    root = tmp_path / "store"
    traced = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-e",
            "trace=fsync,rename,renameat,renameat2,link,linkat",
            sys.executable,
            "-c",
            WRITE_RECORDS,
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    calls = [m.groups() for line in traced.stderr.splitlines() if (m := _CALL.match(line))]
    synced = [i for i, (name, _) in enumerate(calls) if name == "fsync"]
    appeared = {}
    for i, (name, args) in enumerate(calls):
        if name != "fsync":
            source, target = re.findall(r'"([^"]+)"', args)[-2:]
            appeared[target] = (i, source)
    wanted = {"layers/*.json", "manifests/i1.json", "leases/i1.*.lease", "t.jsonl"}
    for pattern in wanted:
        target = next(t for t in appeared if Path(t).match(f"{root}/{pattern}"))
        at, source = appeared[target]
        before = [calls[i][1] for i in synced if i < at]
        after = [calls[i][1] for i in synced if i > at]
        assert any(f"<{source}>" in args for args in before), (target, calls)
        assert any(f"<{Path(target).parent}>" in args for args in after), (target, calls)
