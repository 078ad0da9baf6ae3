"""Sandbox benchmark: local vs docker vs e2b (sweflow's endpoint) on the same rootfs, in one run.

Figures: open+exec(true)+close cycle p50/p95 per backend and their ratio; per-step exec overhead
over a bare ``subprocess.run`` of the same program on the host; memory per idle sandbox with
many open at once (PSS, so shared pages are split fairly); and leaks left after it all.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweflow.bench import BenchError
from sweflow.progress import Progress
from sweflow.sandbox import Limits, SandboxSpec, open_sandbox
from sweflow.sandbox.local import LocalSandbox
from sweflow.sandbox.local.leaks import leftovers


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples_s: list[float], prefix: str) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {
        f"{prefix}_p50_ms": round(statistics.median(ms), 3),
        f"{prefix}_p95_ms": round(_pct(ms, 0.95), 3),
    }


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cycle_times(spec: SandboxSpec, backend: str, n: int) -> list[float]:
    def cycle() -> None:
        sandbox = open_sandbox(spec, backend)
        result = sandbox.exec("true")
        sandbox.close()
        if not result.ok:
            raise BenchError(f"{backend}: exec(true) failed: {result.output}")

    cycle()  # warm-up: builds the init / image once
    return [_timed(cycle) for _ in range(n)]


def exec_overhead(spec: SandboxSpec, backend: str, n: int) -> dict[str, float]:
    """Paired samples of the same program run in the sandbox's shell and directly on the host."""
    inside, bare = [], []
    with open_sandbox(spec, backend) as sandbox:
        sandbox.exec("/bin/true")
        for _ in range(n):
            inside.append(_timed(lambda: sandbox.exec("/bin/true")))
            bare.append(_timed(lambda: subprocess.run(["/bin/true"], check=True)))
    overhead = [i - b for i, b in zip(inside, bare, strict=True)]
    return {
        **_summary(inside, "exec"),
        **_summary(bare, "bare_exec"),
        "exec_overhead_p50_ms": round(statistics.median(overhead) * 1000, 3),
    }


def _memory_kb(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of a process in KiB."""
    values = {"Pss:": 0, "Rss:": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":", 1)[0] + ":"
                if key in values:
                    values[key] = int(line.split()[1])
    except OSError:
        pass
    return values["Pss:"], values["Rss:"]


def idle_memory(spec: SandboxSpec, count: int) -> dict[str, float]:
    """Open ``count`` sandboxes at once; PSS of all their processes per sandbox."""
    from sweflow.sandbox.local.pidns import members

    sandboxes: list[LocalSandbox] = []
    try:
        open_times = []
        for _ in range(count):
            start = time.perf_counter()
            sandboxes.append(LocalSandbox(spec))
            open_times.append(time.perf_counter() - start)
        answered = sum(sb.exec("echo ok").output == "ok\n" for sb in sandboxes)
        pss_kb = rss_kb = 0
        for sb in sandboxes:
            for pid in {sb._proc.pid, *members(sb.init_pid)}:  # keeper + everything inside
                pss, rss = _memory_kb(pid)
                pss_kb, rss_kb = pss_kb + pss, rss_kb + rss
    finally:
        for sb in sandboxes:
            sb.close()
    return {
        "concurrent_open": answered,
        "idle_rss_mb": round(rss_kb / 1024 / count, 3),
        "idle_pss_mb": round(pss_kb / 1024 / count, 3),
        **_summary(open_times, "open_under_load"),
    }


def _remote(
    name: str, spec: SandboxSpec, n_cycle: int, n_exec: int, progress: Progress
) -> dict[str, float]:
    progress(f"{name}: {n_cycle} open+exec+close cycles")
    figures = _summary(cycle_times(spec, name, n_cycle), "cycle")
    progress(f"{name}: exec overhead ({n_exec} pairs)")
    figures.update(exec_overhead(spec, name, n_exec))
    return figures


def run(
    rootfs: Path,
    *,
    quick: bool = False,
    backends: Sequence[str] = ("local", "docker"),
    progress: Progress = print,
) -> dict[str, Any]:
    """``backends``: local always; docker starts a daemon if none answers; e2b runs against
    sweflow's own endpoint, started here (a cloud user adds the network round trip)."""
    n_local, n_remote, n_exec, n_idle = (30, 5, 50, 20) if quick else (300, 30, 500, 100)
    spec = SandboxSpec(layers=[rootfs])
    report: dict[str, Any] = {"rootfs": str(rootfs), "quick": quick}
    before = leftovers()
    progress(f"local: {n_local} open+exec+close cycles")
    local = _summary(cycle_times(spec, "local", n_local), "cycle")
    progress(f"local: exec overhead over bare subprocess.run ({n_exec} pairs)")
    local.update(exec_overhead(spec, "local", n_exec))
    progress(f"local: {n_idle} sandboxes open at once")
    local.update(idle_memory(spec, n_idle))
    report["local"] = local
    if "docker" in backends:
        from sweflow.sandbox.docker.daemon import docker_daemon

        with docker_daemon():
            report["docker"] = _remote("docker", spec, n_remote, n_exec // 5, progress)
    if "e2b" in backends:
        from sweflow.e2b_endpoint.launch import local_endpoint

        with tempfile.TemporaryDirectory(prefix="sweflow-bench-e2b-") as tmp:
            with local_endpoint(rootfs, Path(tmp) / "endpoint.log", [rootfs]):
                report["e2b"] = _remote("e2b", spec, n_remote, n_exec // 5, progress)
    for name in ("docker", "e2b"):
        if name in report:
            report[f"speedup_vs_{name}"] = round(
                report[name]["cycle_p50_ms"] / local["cycle_p50_ms"], 2
            )
    after = leftovers()
    report["leaks"] = sum(len(set(after[k]) - set(before[k])) for k in after)
    report["limits"] = Limits().model_dump()
    return report
