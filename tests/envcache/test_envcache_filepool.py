"""The store's file pool: files many layers hold are stored once, and nothing that reads, writes
or collects layers can tell, but for the bytes. Real layers, real sandboxes, real pycs."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import hand_upper
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.envcache.cleanup import gc, pool_layers
from sweflow.envcache.diskusage import disk_usage
from sweflow.envcache.store import LayerStore
from sweflow.envcache.treedigest import tree_digest
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.layertar import layer_fingerprint

pytestmark = pytest.mark.timeout(300)

SHARED = b"def shared():\n    return 42\n" * 100  # 2,900 bytes


@pytest.fixture
def store(tmp_path: Path) -> LayerStore:
    return LayerStore(tmp_path / "store")


def ino(path: Path) -> int:
    return path.stat().st_ino


def test_a_file_many_layers_hold_is_stored_once(store):
    one = hand_upper(store, {"testbed/lib.py": SHARED, "testbed/a.py": b"a = 1\n"})
    two = hand_upper(
        store,
        {
            "testbed/lib.py": SHARED,
            "testbed/a.py": b"a = 2\n",
            "testbed/run.py": SHARED,
            "testbed/empty": b"",
        },
    )
    os.chmod(two / "testbed/run.py", 0o755)  # same bytes, other mode: another inode
    first, second = store.commit(one, "instance"), store.commit(two, "instance")
    a, b = store.layers / first.digest / "testbed", store.layers / second.digest / "testbed"

    assert ino(a / "lib.py") == ino(b / "lib.py")
    assert (a / "lib.py").stat().st_nlink == 3  # two layers and the pool entry
    assert ino(a / "a.py") != ino(b / "a.py")
    assert ino(b / "run.py") != ino(b / "lib.py") and (b / "run.py").stat().st_mode & 0o111
    assert (b / "empty").stat().st_nlink == 1  # nothing to gain from an empty file
    assert (a / "a.py").read_bytes() == b"a = 1\n" and (b / "a.py").read_bytes() == b"a = 2\n"

    store.write_manifest("i1", [first])
    store.write_manifest("i2", [second])
    usage = disk_usage(store)
    assert usage.files == 6 and usage.distinct_files == 5
    assert usage.shared_bytes == len(SHARED)
    assert usage.apparent_bytes == 3 * len(SHARED) + 12
    assert usage.disk_bytes == usage.apparent_bytes - len(SHARED)
    assert usage.instance_own_bytes == {"i1": 6, "i2": 6 + len(SHARED)}
    assert usage.files_deduplicated_pct == pytest.approx(100 / 6)


def test_du_says_which_kinds_of_layers_share_the_shared_bytes(store):
    """Shared bytes are most of a big store's (2.8 of Verified's 5.5 GB): whether environments
    or instances share them says where the next saving is."""
    other = b"other = 1\n" * 50
    env = store.commit(hand_upper(store, {"venv/lib.py": SHARED}), "env")
    one = store.commit(hand_upper(store, {"lib.py": SHARED, "o.py": other, "a": b"1"}), "instance")
    two = store.commit(hand_upper(store, {"o.py": other, "a": b"2"}), "instance")
    store.write_manifest("i1", [env, one])
    store.write_manifest("i2", [env, two])
    usage = disk_usage(store)
    assert usage.shared_by_kinds == {"env+instance": len(SHARED), "instance": len(other)}
    assert usage.shared_bytes == len(SHARED) + len(other)
    shown = CliRunner().invoke(
        app, ["env", "du", "--store", str(store.root)], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0 and "by env and instance layers" in shown.output, shown.output


def test_a_sandbox_that_writes_a_pooled_file_changes_only_its_own_copy(store, bookworm_rootfs):
    base = store.import_dir(bookworm_rootfs)
    first = store.commit(hand_upper(store, {"testbed/lib.py": SHARED}), "instance")
    second = store.commit(hand_upper(store, {"testbed/lib.py": SHARED, "x": b"x"}), "instance")
    spec = SandboxSpec(layers=[store.layer_path(layer.digest) for layer in (base, first)])
    with open_sandbox(spec) as sandbox:
        result = sandbox.exec("echo changed >> /testbed/lib.py && tail -n1 /testbed/lib.py")
    assert result.ok and result.output.strip() == "changed", result.output
    for layer in (first, second):
        assert (store.layers / layer.digest / "testbed/lib.py").read_bytes() == SHARED
    entries = [entry for folder in store.pool.iterdir() for entry in folder.iterdir()]
    assert [entry.read_bytes() for entry in entries if entry.stat().st_size == len(SHARED)] == [
        SHARED
    ]


def _layer_with_module(store: LayerStore, mtime: int, mode: py_compile.PycInvalidationMode):
    upper = hand_upper(store, {"site/pkg/__init__.py": b"", "site/pkg/mod.py": SHARED})
    source = upper / "site/pkg/mod.py"
    os.utime(source, (mtime, mtime))
    # compiled where the sandbox sees it, as pip compiles in the environment's own path
    py_compile.compile(str(source), dfile="/site/pkg/mod.py", doraise=True, invalidation_mode=mode)
    return store.commit(upper, "env")


def test_a_source_whose_pyc_checks_its_mtime_keeps_its_mtime(store):
    """Pip compiles timestamp pycs: a source linked to another layer's copy, with that copy's
    mtime, would make its pyc stale (recompiled in every sandbox, written to its upper)."""
    timestamp = py_compile.PycInvalidationMode.TIMESTAMP
    old, new = (_layer_with_module(store, t, timestamp) for t in (1_600_000_000, 1_700_000_000))
    sources = [store.layers / layer.digest / "site/pkg/mod.py" for layer in (old, new)]
    assert ino(sources[0]) != ino(sources[1])
    assert [int(s.stat().st_mtime) for s in sources] == [1_600_000_000, 1_700_000_000]
    for layer in (old, new):  # Python itself finds each pyc fresh: it does not write a new one
        site = store.layers / layer.digest / "site"
        pycs = sorted((site / "pkg/__pycache__").iterdir())
        before = [p.read_bytes() for p in pycs]
        probe = [sys.executable, "-c", "import pkg.mod, sys; sys.exit(pkg.mod.__cached__ is None)"]
        done = subprocess.run(
            probe,
            cwd=site,
            env={**os.environ, "PYTHONPATH": str(site)},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert [p.read_bytes() for p in sorted((site / "pkg/__pycache__").iterdir())] == before

    checked = py_compile.PycInvalidationMode.CHECKED_HASH
    first, second = (_layer_with_module(store, t, checked) for t in (1_600_000_000, 1_700_000_000))
    a, b = (store.layers / layer.digest / "site/pkg" for layer in (first, second))
    assert ino(a / "mod.py") == ino(b / "mod.py")  # a hash-checked pyc does not read the mtime
    assert ino(next((a / "__pycache__").iterdir())) == ino(next((b / "__pycache__").iterdir()))


def _checkout_with_build(store: LayerStore, built_at: int, edited: bytes) -> Path:
    """An instance layer as an install leaves it: a git checkout (two tracked files: one the
    same in every layer, one not) and an extension it compiled in the tree, all from its own
    build's time."""
    upper = hand_upper(store, {"testbed/lib.py": SHARED, "testbed/edited.py": edited})
    testbed = upper / "testbed"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(testbed)]
    subprocess.run([*git, "init", "-q"], check=True)
    # as an export configures it (repos._EXPORT_CONFIG): linking a file to the pool changes its
    # ctime, which the index would otherwise compare (a change when a second has passed)
    subprocess.run([*git, "config", "core.checkStat", "minimal"], check=True)
    subprocess.run([*git, "config", "core.trustctime", "false"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (testbed / "_speedups.so").write_bytes(SHARED * 3)  # untracked, as .gitignore'd outputs are
    for path in testbed.rglob("*"):
        os.utime(path, (built_at, built_at), follow_symlinks=False)
    subprocess.run([*git, "update-index", "--refresh", "-q"], check=True)  # stat as it is now
    return upper


def test_what_an_install_built_in_a_work_tree_is_stored_once_whatever_its_mtime(store):
    """The index matches a tracked file by its mtime, so a tracked file keeps its own; a build
    output it does not track (astropy's compiled extensions: identical in most instances of a
    version, built at another time by each) is shared, and git sees no change in either."""
    times = (1_600_000_000, 1_700_000_000)
    uppers = [_checkout_with_build(store, t, b"v = %d\n" % t) for t in times]
    trees = [store.layers / store.commit(upper, "instance").digest / "testbed" for upper in uppers]
    assert ino(trees[0] / "_speedups.so") == ino(trees[1] / "_speedups.so")
    assert ino(trees[0] / "lib.py") != ino(trees[1] / "lib.py")  # same bytes, other mtime
    assert int((trees[1] / "lib.py").stat().st_mtime) == 1_700_000_000
    for tree in trees:
        status = subprocess.run(
            ["git", "-C", str(tree), "diff-files", "--name-only"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert status.stdout == ""


def _pooled_by_mtime(store: LayerStore, path: Path, built_at: int) -> None:
    """``path`` as the pool before f6fd652 left a build output of a checkout: a copy of its own
    with its build's mtime, pooled under a key with that mtime (``KEY-tMTIME``)."""
    inode = ino(path)
    [entry] = [e for folder in store.pool.iterdir() for e in folder.iterdir() if ino(e) == inode]
    copy = path.with_name(path.name + ".copy")
    shutil.copy2(path, copy)
    os.utime(copy, (built_at, built_at))
    os.replace(copy, path)
    os.link(path, entry.with_name(f"{entry.name}-t{built_at}"))
    if entry.stat().st_nlink == 1:
        entry.unlink()


def test_dedupe_moves_files_pooled_under_an_older_rule_to_their_entry_now(store):
    """A store pooled before the work-tree rule keeps each instance's build outputs apart, each
    under its own mtime's entry: ``env dedupe`` links them as a commit now would, removes the
    entries it left (the first stays as a second name of the shared file), and gc later takes
    every name of a file no layer holds."""
    times = (1_600_000_000, 1_700_000_000)
    uppers = [_checkout_with_build(store, t, b"v = %d\n" % t) for t in times]
    layers = [store.commit(upper, "instance") for upper in uppers]
    for i, layer in enumerate(layers):
        store.write_manifest(f"i{i}", [layer])
    trees = [store.layers / layer.digest / "testbed" for layer in layers]
    for tree, built_at in zip(trees, times, strict=True):
        _pooled_by_mtime(store, tree / "_speedups.so", built_at)
    assert ino(trees[0] / "_speedups.so") != ino(trees[1] / "_speedups.so")
    before = disk_usage(store).disk_bytes

    report = pool_layers(store)
    assert report.shared == 1 and not report.changed
    assert report.pruned_files == 1 and report.given_back == len(SHARED * 3)
    assert ino(trees[0] / "_speedups.so") == ino(trees[1] / "_speedups.so")
    assert disk_usage(store).disk_bytes == before - len(SHARED * 3)
    for layer, tree in zip(layers, trees, strict=True):
        assert tree_digest(tree.parent).digest == layer.digest
        status = subprocess.run(
            ["git", "-C", str(tree), "diff-files", "--name-only"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert status.stdout == ""
    again = pool_layers(store)
    assert again.files == 0 and again.given_back == 0

    report = gc(store, keep_instances=set(), grace_s=0)
    assert sorted(report.layers) == sorted(layer.digest for layer in layers)
    assert [entry for folder in store.pool.iterdir() for entry in folder.iterdir()] == []


def test_gc_gives_back_a_pooled_file_when_its_last_layer_goes(store):
    keep = store.commit(hand_upper(store, {"lib.py": SHARED, "k": b"k" * 10}), "instance")
    drop = store.commit(hand_upper(store, {"lib.py": SHARED, "d": b"d" * 20}), "instance")
    store.write_manifest("keep", [keep])
    store.write_manifest("drop", [drop])

    report = gc(store, keep_instances={"keep"}, grace_s=0)
    assert report.layers == [drop.digest] and report.pool_files == 1  # its own file's entry
    assert report.freed_bytes == 20  # the shared file is still the other layer's
    assert (store.layers / keep.digest / "lib.py").read_bytes() == SHARED

    report = gc(store, keep_instances=set(), grace_s=0)
    assert report.layers == [keep.digest] and report.pool_files == 2
    assert report.freed_bytes == 10 + len(SHARED)
    assert "2 pooled files no layer uses" in report.summary()
    assert [entry for folder in store.pool.iterdir() for entry in folder.iterdir()] == []


def test_concurrent_commits_share_one_copy(store):
    uppers = [hand_upper(store, {"lib.py": SHARED, "own": b"%d" % i}) for i in range(6)]
    barrier = threading.Barrier(len(uppers))
    layers = []

    def commit(upper: Path) -> None:
        barrier.wait()
        layers.append(store.commit(upper, "instance"))

    threads = [threading.Thread(target=commit, args=(upper,)) for upper in uppers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len({layer.digest for layer in layers}) == 6
    assert len({ino(store.layers / layer.digest / "lib.py") for layer in layers}) == 1


def _unpool(store: LayerStore) -> None:
    """The store as a version of sweflow before the pool left it: every file its own copy."""
    for layer in store.layers.iterdir():
        for path in (p for p in layer.rglob("*") if p.is_file() and p.stat().st_nlink > 1):
            copy = path.with_name(path.name + ".copy")
            shutil.copy2(path, copy)
            os.replace(copy, path)
    shutil.rmtree(store.pool)
    store.pool.mkdir()


def test_dedupe_pools_a_store_built_before_the_pool(store, tmp_path):
    layers = [
        store.commit(hand_upper(store, {"lib.py": SHARED, "own": b"%d" % i}), "instance")
        for i in range(3)
    ]
    for i, layer in enumerate(layers):
        store.write_manifest(f"i{i}", [layer])
    _unpool(store)
    assert disk_usage(store).shared_bytes == 0
    tampered = store.layers / layers[2].digest / "own"
    tampered.write_bytes(b"written into a finished layer")

    first = pool_layers(store, only=[layers[0].digest])  # the layers a few instances use
    assert first.layers == 1 and first.shared == 0 and not first.changed
    report = pool_layers(store)
    assert report.layers == 2 and report.changed == [layers[2].digest]
    assert report.shared == 1 and report.shared_bytes == len(SHARED)
    assert ino(store.layers / layers[0].digest / "lib.py") == ino(
        store.layers / layers[1].digest / "lib.py"
    )
    again = pool_layers(store)
    assert again.layers == 2 and again.files == 0  # every file already has its entry

    runner = CliRunner()
    shown = runner.invoke(app, ["env", "du", "--store", str(store.root)])
    assert shown.exit_code == 0, shown.output
    assert "3 instances" in shown.output and "on disk" in shown.output
    as_json = runner.invoke(app, ["env", "du", "--store", str(store.root), "--json"])
    figures = json.loads(as_json.output)
    assert figures["instances"] == 3 and figures["shared_bytes"] == len(SHARED)
    assert figures["disk_bytes"] == figures["apparent_bytes"] - len(SHARED)
    said = runner.invoke(app, ["env", "dedupe", "--store", str(store.root)])
    assert said.exit_code == 0 and "left alone" in said.output and layers[2].digest in said.output
    refused = runner.invoke(
        app, ["env", "du", "--store", str(tmp_path / "nothing")], env={"COLUMNS": "400"}
    )
    assert refused.exit_code != 0 and "is not a layer store" in refused.output


def test_a_layer_keeps_its_tar_fingerprint_when_another_layer_shares_its_files(store):
    """docker and e2b cache a layer's tar by its fingerprint: a later layer linking the same
    file (which changes that file's ctime) must not make every earlier layer's tar stale."""
    first = store.commit(hand_upper(store, {"lib.py": SHARED, "a": b"a"}), "instance")
    path = store.layers / first.digest
    before = layer_fingerprint(path)
    store.commit(hand_upper(store, {"lib.py": SHARED, "b": b"b"}), "instance")
    assert (path / "lib.py").stat().st_nlink == 3
    assert layer_fingerprint(path) == before
    (path / "a").write_bytes(b"rewritten")  # what the fingerprint is for
    assert layer_fingerprint(path) != before


def test_a_pooled_layer_keeps_its_digest(store):
    """A layer's digest records its hard links, and a layer sent to another node must arrive
    with the digest it left with: two identical files in one layer stay two inodes, and the
    second copies of two layers share the second entry (a figure every checkout holds twice)."""
    first = store.commit(hand_upper(store, {"a.py": SHARED, "b.py": SHARED}), "instance")
    second = store.commit(hand_upper(store, {"c.py": SHARED, "d.py": SHARED}), "instance")
    for layer in (first, second):
        root = store.layers / layer.digest
        assert tree_digest(root).digest == layer.digest
    a, b = (store.layers / first.digest / name for name in ("a.py", "b.py"))
    c, d = (store.layers / second.digest / name for name in ("c.py", "d.py"))
    assert a.stat().st_ino == c.stat().st_ino != b.stat().st_ino == d.stat().st_ino
    again = pool_layers(store)
    assert again.changed == [] and again.files == 0
    for layer in (first, second):
        assert tree_digest(store.layers / layer.digest).digest == layer.digest
