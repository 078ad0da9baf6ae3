"""Ray executor benchmark: the same instances graded by the local executor and on a real Ray
cluster of this machine (``sweflow ray start`` nodes), in one run.

- ``local_s_per_instance`` / ``ray_s_per_instance``: wall time of grading the gold patches of
  the demo slice (``evaluate`` as the pipeline's stage does it), divided by the instances, with
  the same concurrency (the head's 2 slots, 2 local threads) on the same store, so no layer
  moves; after one untimed pass each (imports, Ray's worker processes), p50 over the reps, the
  two interleaved. ``overhead_ms_per_instance`` is their
  difference; ``noop_overhead_ms`` the same for a work item that does nothing (the executor's
  own cost: task, scratch folder, files back, ledger).
- ``throughput_per_min``: gold gradings per minute on one node, then on two (the second node
  joins with an empty store: a warm-up pass fetches its layers, then the timed pass). Both nodes
  share this machine's 2 cores, so the second adds slots, not compute.
- ``transfer_mb_per_s`` and ``moved_mb_per_instance``: the layers the second node fetched from
  the head during the warm-up (tar through Ray's object store, digests checked on arrival).
- ``episode_sandbox``: what an RL episode whose sandbox lives on a node (RemoteSandbox, an actor
  per sandbox) pays beside a sandbox of this process: open+close p50 of each, and the p50 of
  one ``exec`` step (``true``) of each and their difference; the two interleaved.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sweflow.bench import DEMO, BenchError, bench_root, wheelhouse
from sweflow.cluster.base import Executor, Node
from sweflow.cluster.local import LocalExecutor
from sweflow.cluster.local_cluster import LocalCluster
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.dataset import Dataset
from sweflow.envcache.store import LayerStore
from sweflow.grading.evaluate import evaluate
from sweflow.grading.predictions import gold_predictions
from sweflow.grading.reward import Grader
from sweflow.progress import Progress
from sweflow.sandbox import Sandbox, open_sandbox

SLOTS = 2


def _noop(item: int, out: Path, node: Node) -> int:
    return item


def _grade_all(executor: Executor, grader: Grader, instances, root: Path) -> float:
    start = time.monotonic()
    summary = evaluate(
        grader,
        instances,
        gold_predictions(instances),
        "bench",
        root=root,
        report_dir=root,
        max_workers=SLOTS,
        executor=executor,
    )
    seconds = time.monotonic() - start
    if summary.report["resolved_instances"] != len(instances):
        raise BenchError(f"gold did not resolve every instance: {summary.markdown_path}")
    return seconds


def _noop_all(executor: Executor, n: int, root: Path) -> float:
    start = time.monotonic()
    executor.map(
        _noop, list(range(n)), [root] * n, keys=[str(i) for i in range(n)], max_workers=SLOTS
    )
    return time.monotonic() - start


def _sandbox_cycle(open_one: Callable[[], Sandbox], steps: int) -> tuple[float, float]:
    """(open+close seconds, p50 seconds of one ``exec`` step) of one sandbox."""
    start = time.perf_counter()
    sandbox = open_one()
    opened = time.perf_counter() - start
    execs = []
    for _ in range(steps):
        began = time.perf_counter()
        sandbox.exec("true")
        execs.append(time.perf_counter() - began)
    began = time.perf_counter()
    sandbox.close()
    return opened + time.perf_counter() - began, statistics.median(execs)


def _episode_sandboxes(executor, store: Path, instance_id: str, cycles: int) -> dict:
    spec = instance_sandbox_spec(LayerStore(store), instance_id)
    local, remote = [], []
    for _ in range(cycles):
        local.append(_sandbox_cycle(lambda: open_sandbox(spec), 20))
        remote.append(_sandbox_cycle(lambda: executor.open_sandbox(instance_id, "local"), 20))

    def p50_ms(runs: list[tuple[float, float]], index: int) -> float:
        return statistics.median(run[index] for run in runs) * 1000

    return {
        "cycles": cycles,
        "local_cycle_p50_ms": round(p50_ms(local, 0), 1),
        "ray_cycle_p50_ms": round(p50_ms(remote, 0), 1),
        "local_exec_p50_ms": round(p50_ms(local, 1), 2),
        "ray_exec_p50_ms": round(p50_ms(remote, 1), 2),
        "exec_overhead_p50_ms": round(p50_ms(remote, 1) - p50_ms(local, 1), 2),
    }


def run(quick: bool = False, progress: Progress = print) -> dict:
    from sweflow.cluster.ray_executor import RayExecutor

    count, reps = (4, 2) if quick else (12, 5)
    store = bench_root("ray") / "store"
    data = Dataset.load(DEMO)
    instances = data.sample(count)
    progress(f"building {len(instances)} demo instances in {store}")
    built = data.builder(store, wheelhouse=wheelhouse()).build(instances)
    if failed := [r for r in built if r.status == "error"]:
        raise BenchError(f"build failed: {failed[0].instance_id}: {failed[0].error}")
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-ray-") as tmp:
        root = Path(tmp)
        with LocalCluster(root) as cluster:
            progress("starting a Ray head (2 sandbox slots) on this machine")
            cluster.add_node("head", slots=SLOTS, store=store)
            ray_executor = RayExecutor(store, address=cluster.address)
            local_executor = LocalExecutor(store)
            grader = Grader(store, data.specs)
            local, ray_s, noop_local, noop_ray = [], [], [], []
            progress("warm-up: both executors grade once (imports, Ray's worker processes)")
            _grade_all(local_executor, grader, instances, root / "lw")
            _grade_all(ray_executor, grader, instances, root / "rw")
            for rep in range(reps):
                progress(f"rep {rep + 1}/{reps}: local and ray, {len(instances)} gold gradings")
                local.append(_grade_all(local_executor, grader, instances, root / f"l{rep}"))
                ray_s.append(_grade_all(ray_executor, grader, instances, root / f"r{rep}"))
                noop_local.append(_noop_all(local_executor, 50, root / "noop"))
                noop_ray.append(_noop_all(ray_executor, 50, root / "noop"))
            one_node = statistics.median(ray_s)
            progress("sandboxes on the node (RL episodes) beside sandboxes of this process")
            episode = _episode_sandboxes(ray_executor, store, instances[0].instance_id, reps * 2)
            progress("a second node joins with an empty store")
            cluster.add_node("second", slots=SLOTS)
            two = RayExecutor(store, address=cluster.address)
            _grade_all(two, grader, instances, root / "warm")  # the second node fetches
            moved = list(two.moved.values())
            two_nodes = statistics.median(
                _grade_all(two, grader, instances, root / f"t{rep}") for rep in range(reps)
            )
            ray_executor.close()
            two.close()
            import ray

            ray.shutdown()
    n = len(instances)
    local_p50, ray_p50 = statistics.median(local) / n, one_node / n
    moved_bytes = sum(m.bytes for m in moved)
    moved_seconds = sum(m.seconds for m in moved)
    return {
        "instances": n,
        "reps": reps,
        "local_s_per_instance": round(local_p50, 4),
        "ray_s_per_instance": round(ray_p50, 4),
        "overhead_ms_per_instance": round((ray_p50 - local_p50) * 1000, 1),
        "noop_overhead_ms": round(
            (statistics.median(noop_ray) - statistics.median(noop_local)) / 50 * 1000, 2
        ),
        "throughput_per_min": {
            "local": round(60 / local_p50, 1),
            "ray_1_node": round(60 / ray_p50, 1),
            "ray_2_nodes": round(60 * n / two_nodes, 1),
        },
        "instances_fetched": len(moved),
        "transfer_mb_per_s": round(moved_bytes / 2**20 / moved_seconds, 1) if moved else None,
        "moved_mb_per_instance": round(moved_bytes / 2**20 / len(moved), 2) if moved else None,
        "episode_sandbox": episode,
        "note": "both nodes share this machine's 2 cores: a second node adds slots, not compute",
    }
