"""Leases: gc keeps the layers that sandboxes, specs just handed out and builds use, and lets go
of what a dead holder kept. Real flocks, held by real processes and sandboxes; no mocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import hand_upper

from sweflow.envcache.cleanup import gc
from sweflow.envcache.instance_spec import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.sandbox import SandboxStartError, open_sandbox

pytestmark = pytest.mark.timeout(120)

# A process that holds a lease as a sandbox does, until it is killed.
HOLDER = """
import sys, time
from sweflow.sandbox.leases import hold_leases
held = hold_leases([sys.argv[1]])
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def store(tmp_path: Path) -> LayerStore:
    return LayerStore(tmp_path / "store")


def stack(store: LayerStore, instance_id: str):
    """A manifest for ``instance_id``: a shared env layer and an instance layer of its own."""
    env = store.commit(hand_upper(store, {"opt/venv/ok": b"env"}), "env")
    own = store.commit(hand_upper(store, {"testbed/a.py": instance_id.encode()}), "instance")
    store.write_manifest(instance_id, [env, own])
    return env, own


def age(lease: Path) -> None:
    """As if its last use were an hour ago: only a flock keeps it live now."""
    hour_ago = time.time() - 3600
    os.utime(lease, (hour_ago, hour_ago))


def test_a_held_lease_keeps_its_layers_and_a_dead_holders_does_not(store: LayerStore):
    env, own = stack(store, "i1")
    [lease] = instance_sandbox_spec(store, "i1").leases
    age(lease)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lease)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        report = gc(store, keep_instances=set())  # drop every instance: i1 is in use
        assert report.manifests == [] and report.layers == []
        assert report.in_use_instances == ["i1"]
        assert report.in_use == {}  # its manifest is kept, so its layers are referenced
        assert store.has_instance("i1")
        assert "kept 1 instances in use" in report.summary()
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no release, no unlink
        holder.wait()
    report = gc(store, keep_instances=set())
    assert report.manifests == ["i1"] and sorted(report.layers) == sorted([env.digest, own.digest])
    assert report.leases == [lease.name] and not lease.exists()
    assert not store.has_layer(own.digest)


def test_a_layer_no_manifest_needs_stays_while_a_sandbox_may_use_it(store: LayerStore):
    """Rebuilt from another spec, an instance's old layers are referenced by no manifest: gc
    keeps them for the lease of a spec handed out before, and names who uses them."""
    env, old = stack(store, "i1")
    spec = instance_sandbox_spec(store, "i1")
    new = store.commit(hand_upper(store, {"testbed/a.py": b"rebuilt"}), "instance")
    store.write_manifest("i1", [env, new])

    report = gc(store)  # the spec was handed out just now
    assert report.layers == [] and report.in_use == {old.digest: ["i1"]}
    assert "kept 1 layers in use" in report.summary()

    [lease] = spec.leases
    age(lease)  # no sandbox opened on it within the grace
    report = gc(store)
    assert report.layers == [old.digest] and report.leases == [lease.name]
    with pytest.raises(SandboxStartError, match="withdrawn"):
        open_sandbox(spec)  # refused before any layer is looked at: an infrastructure failure
    assert store.has_instance("i1")


def test_grace_zero_keeps_only_what_is_held(store: LayerStore):
    stack(store, "i1")
    instance_sandbox_spec(store, "i1")
    report = gc(store, keep_instances=set(), grace_s=0)
    assert report.manifests == ["i1"] and report.in_use_instances == []


def test_a_sandbox_holds_its_lease_until_it_closes(store: LayerStore, bookworm_rootfs: Path):
    base = store.import_dir(bookworm_rootfs)
    own = store.commit(hand_upper(store, {"testbed/a.py": b"x = 1\n"}), "instance")
    store.write_manifest("i1", [base, own])
    spec = instance_sandbox_spec(store, "i1")
    [lease] = spec.leases
    with open_sandbox(spec) as sandbox:
        age(lease)
        report = gc(store, keep_instances=set())
        assert report.in_use_instances == ["i1"] and report.layers == []
        assert sandbox.exec("cat /testbed/a.py").output == "x = 1\n"
    assert time.time() - lease.stat().st_mtime < 60  # its last use: the close
    assert gc(store, keep_instances=set()).in_use_instances == ["i1"]  # within the grace
    age(lease)
    report = gc(store, keep_instances=set())
    assert report.manifests == ["i1"] and own.digest in report.layers
