"""Soak tests of the local sandbox: many open/exec/close cycles and many sandboxes at once, then
a search for anything left behind (mounts, processes, cgroups, state dirs, file descriptors).

Marked ``slow``: run with ``pytest -m slow tests/sandbox/test_sandbox_soak.py -s`` to see the
timings.
"""

from __future__ import annotations

import gc
import glob
import os
import statistics
import time
from pathlib import Path

import pytest

from sweflow.sandbox import open_sandbox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

CYCLES = int(os.environ.get("SWEFLOW_SOAK_CYCLES", "1000"))
AT_ONCE = int(os.environ.get("SWEFLOW_SOAK_AT_ONCE", "100"))


@pytest.fixture
def private_state(tmp_path, monkeypatch) -> Path:
    """A state dir of this test's own, so that sandboxes other tests open meanwhile don't count."""
    state = tmp_path / "state"
    monkeypatch.setenv("SWEFLOW_STATE_DIR", str(state))
    return state


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_baseline() -> int:
    """The open files before a soak, after the collector has closed what earlier tests left to
    it. A leak grows the count from here; files closing meanwhile (CI once saw 75 -> 70) are
    not one, so only growth fails."""
    gc.collect()
    return fd_count()


def pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def leaks(state: Path, ids: set[str], namespaces: set[str]) -> dict[str, list[str]]:
    """Whatever the sandboxes ``ids`` (pid namespaces ``namespaces``) left on the host."""
    found: dict[str, list[str]] = {"mounts": [], "processes": [], "cgroups": [], "state": []}
    with open("/proc/self/mountinfo") as f:
        found["mounts"] = [line.strip() for line in f if str(state) in line]
    processes = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        nspid = next(
            (line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:")), ""
        )
        processes[name] = (cmdline, pid_ns(int(name)), nspid)
    # A pid namespace's number is reused once it is gone: one with a live init that is not ours
    # (another user's sandbox, opened since) is not a leak of ours.
    foreign = {
        ns
        for cmdline, ns, nspid in processes.values()
        if nspid == "1" and str(state) not in cmdline
    }
    for name, (cmdline, ns, _) in processes.items():
        if str(state) in cmdline or (ns in namespaces and ns not in foreign):
            found["processes"].append(f"{name}: {cmdline[:200]}")
    for sandbox_id in ids:
        found["cgroups"] += glob.glob(f"/sys/fs/cgroup/*/sweflow/{sandbox_id}")
        found["cgroups"] += glob.glob(f"/sys/fs/cgroup/sweflow/{sandbox_id}")
    if state.exists():
        found["state"] = [p.name for p in state.iterdir()]
    return {kind: items for kind, items in found.items() if items}


def settle(state: Path, ids: set[str], namespaces: set[str], seconds: float = 5.0) -> dict:
    """Leaks, after giving the kernel a moment to reap what close() killed."""
    deadline = time.monotonic() + seconds
    while True:
        found = leaks(state, ids, namespaces)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def test_open_exec_close_cycles_leave_nothing(sandbox_spec, private_state, capsys):
    spec = sandbox_spec()
    with open_sandbox(spec) as warm:  # builds the init, fills caches: not part of the baseline
        warm.exec("true")
    baseline = fd_baseline()
    ids: set[str] = set()
    namespaces: set[str] = set()
    cycle_s: list[float] = []
    for i in range(CYCLES):
        start = time.monotonic()
        sb = open_sandbox(spec)
        try:
            ids.add(sb.id)
            namespaces.add(pid_ns(sb.init_pid) or "")
            result = sb.exec(f"echo cycle-{i}")
            assert (result.exit_code, result.output) == (0, f"cycle-{i}\n")
        finally:
            sb.close()
        cycle_s.append(time.monotonic() - start)
    namespaces.discard("")

    assert len(ids) == CYCLES
    assert settle(private_state, ids, namespaces) == {}
    assert fd_count() - baseline <= 2, (baseline, fd_count())  # see fd_baseline
    p50, p95 = percentile(cycle_s, 0.5), percentile(cycle_s, 0.95)
    with capsys.disabled():
        print(
            f"\n[soak] {CYCLES} open/exec/close cycles: p50 {p50 * 1000:.1f} ms, "
            f"p95 {p95 * 1000:.1f} ms, max {max(cycle_s) * 1000:.1f} ms, "
            f"total {sum(cycle_s):.1f} s, mean {statistics.mean(cycle_s) * 1000:.1f} ms"
        )


def test_many_sandboxes_at_once_leave_nothing(sandbox_spec, private_state, capsys):
    spec = sandbox_spec()
    with open_sandbox(spec) as warm:
        warm.exec("true")
    baseline = fd_baseline()
    sandboxes = []
    start = time.monotonic()
    try:
        for _ in range(AT_ONCE):
            sandboxes.append(open_sandbox(spec))
        opened = time.monotonic()
        ids = {sb.id for sb in sandboxes}
        namespaces = {pid_ns(sb.init_pid) for sb in sandboxes}
        assert len(ids) == AT_ONCE and None not in namespaces and len(namespaces) == AT_ONCE
        for sb in sandboxes:
            result = sb.exec("echo ok")
            assert (result.exit_code, result.output) == (0, "ok\n")
        # they are really separate: each sees its own processes only
        assert all(int(sb.exec("ls /proc | grep -c '^[0-9]'").output) <= 5 for sb in sandboxes[:10])
        execd = time.monotonic()
    finally:
        for sb in sandboxes:
            sb.close()
    closed = time.monotonic()
    assert settle(private_state, ids, namespaces) == {}
    assert fd_count() - baseline <= 2, (baseline, fd_count())  # see fd_baseline
    with capsys.disabled():
        print(
            f"\n[soak] {AT_ONCE} sandboxes at once: open {opened - start:.2f} s, "
            f"exec {execd - opened:.2f} s, close {closed - execd:.2f} s"
        )
