"""Pipeline benchmark: `end-to-end/demo` on a real Prefect server, cold, cached and retried.

A private ``prefect server`` and process worker (deployments/local.py of this checkout: own
PREFECT_HOME, a free port, stopped by PID) deploy deployments/prefect.yaml and run
`end-to-end/demo` on N demo tasks (taken from each project in turn) with a scripted model
replaying their gold fixes, offline from the wheelhouse of scripts/prefetch.py:

- ``cold_s``: the first run, in a fresh run directory (builds, validates, agents, grading),
  from submit to Completed on the server;
- ``cached_p50_s``: R re-runs with the same config (every stage must come back Cached), from
  submit to Completed on the server; ``cached_cli_p50_s``: the same re-runs as the wall time of
  `prefect deployment run --watch`, which adds the CLI's start and its fixed 3 s wait for
  straggler logs after the run ends;
- ``retry_p50_s``: R times, a run whose `evaluate` fails by an injected fault, then
  `prefect flow-run retry`: the retry's wall time until the run is final (the done stages must
  come back Cached);
- ``start_latency_p50_s``: R runs of the stage deployment `evaluate/demo` on the same config
  (Cached), from submit to Running, as a user re-running one stage from the UI waits for it.

The ratios are against the cold run of the same invocation. The library never imports Prefect:
the stack drives the ``prefect`` command and the server's REST API.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sweflow.bench import DEMO, WHEELHOUSE, BenchError
from sweflow.envcache.dataset import Dataset
from sweflow.paths import CHECKOUT
from sweflow.ports import free_port
from sweflow.progress import Progress
from sweflow.testing.scripted_model import gold_replay, scripted_endpoint

STAGES = ["build_envs", "validate_envs", "collect_trajectories", "infer", "evaluate"]
LOCAL_PREFECT = CHECKOUT / "deployments" / "local.py"  # absent from a wheel: refused


def require_checkout() -> None:
    """The benchmark runs this checkout's deployments with Prefect installed."""
    if not LOCAL_PREFECT.is_file() or importlib.util.find_spec("prefect") is None:
        raise BenchError(
            "needs a checkout with deployments/local.py and the pipeline extra "
            "(pip install -e '.[pipeline]')"
        )


def local_prefect(state: Path, port: int) -> Any:
    """deployments/local.py's LocalPrefect of this checkout (deployments/ is not a package of
    sweflow: the stack deploys and runs this checkout's flows)."""
    require_checkout()
    spec = importlib.util.spec_from_file_location("sweflow_bench_local_prefect", LOCAL_PREFECT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # its dataclass looks itself up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.LocalPrefect(state, port=port)


def _timed_run(stack: Any, config: dict, progress: Progress) -> tuple[int, str, float]:
    """One deployment run, its stage lines to ``progress`` (stderr under --json)."""
    start = time.monotonic()
    code, run_id = stack.run(
        "end-to-end/demo", "--params", json.dumps({"config": config}), out=progress
    )
    if not run_id:
        raise BenchError("no flow run id in the output of `prefect deployment run`")
    return code, run_id, time.monotonic() - start


def _expect(states: dict[str, str], wanted: dict[str, str], what: str) -> None:
    if states != wanted:
        raise BenchError(f"{what}: task states {states}, expected {wanted}")


def run(tasks: int, reps: int, progress: Progress = print) -> dict[str, Any]:
    """Cold, cached, retried and stage-start figures of ``reps`` repetitions on ``tasks`` tasks."""
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-pipeline-") as tmp_dir:
        tmp = Path(tmp_dir)
        stack = local_prefect(tmp / "prefect", free_port())
        picked = Dataset.load(DEMO).sample(tasks)
        script = tmp / "script.json"
        script.write_text(json.dumps(gold_replay(picked)))
        with scripted_endpoint(script) as (url, _proc):
            try:
                progress("starting prefect server, worker, deployments")
                stack.up()
                config = {
                    "name": "bench",
                    "run_dir": str(tmp / "run"),
                    "retries": 0,
                    "stages": STAGES,
                    "dataset": {"path": str(DEMO), "instances": [t.instance_id for t in picked]},
                    "envs": {"wheelhouse": str(WHEELHOUSE)},
                    "model": {"url": url, "name": "scripted"},
                    "agent": {"tool_mode": "text", "max_steps": 5},
                    "collect": {"rollouts": 1, "limit": tasks},
                    "infer": {"limit": tasks},
                    "eval": {"run_id": "bench"},
                }
                return _measure(stack, config, tmp / "run", reps, progress) | {"tasks": tasks}
            finally:
                stack.down()


def _measure(
    stack: Any, config: dict, run_dir: Path, reps: int, progress: Progress
) -> dict[str, Any]:
    code, run_id, _ = _timed_run(stack, config, progress)
    if code != 0:
        raise BenchError(f"cold run failed: {stack.state / 'worker.log'}")
    _expect(stack.task_states(run_id), dict.fromkeys(STAGES, "Completed"), "cold")
    cold = stack.since_submit(run_id, "end_time")
    progress(f"cold: {cold:.1f} s")
    cached, cached_cli, retried, started = [], [], [], []
    for rep in range(reps):
        code, run_id, seconds = _timed_run(stack, config, progress)
        _expect(stack.task_states(run_id), dict.fromkeys(STAGES, "Cached"), "cached")
        cached.append(stack.since_submit(run_id, "end_time"))
        cached_cli.append(seconds)
        faults = run_dir / ".faults"
        faults.mkdir(exist_ok=True)
        (faults / "evaluate").touch()
        code, run_id, _ = _timed_run(stack, {**config, "force": ["evaluate"]}, progress)
        if code == 0:
            raise BenchError("the injected evaluate fault did not fail the run")
        start = time.monotonic()
        stack.prefect("flow-run", "retry", run_id)
        final = stack.wait(run_id, timeout=600)
        retried.append(time.monotonic() - start)
        after = {**dict.fromkeys(STAGES[:-1], "Cached"), "evaluate": "Completed"}
        _expect(
            stack.task_states(run_id) | {"final": final}, after | {"final": "Completed"}, "retry"
        )
        params = json.dumps({"config": config})
        code, run_id = stack.run("evaluate/demo", "--params", params, out=progress)
        if code != 0 or not run_id:
            raise BenchError("the evaluate/demo stage run failed")
        started.append(stack.since_submit(run_id))
        progress(
            f"rep {rep}: cached {cached[-1]:.1f} s ({seconds:.1f} s by the CLI), "
            f"retry {retried[-1]:.1f} s, stage start {started[-1]:.1f} s"
        )
    cached_p50, retry_p50 = statistics.median(cached), statistics.median(retried)
    return {
        "reps": reps,
        "cold_s": round(cold, 1),
        "cached_p50_s": round(cached_p50, 1),
        "retry_p50_s": round(retry_p50, 1),
        "cached_samples_s": [round(s, 1) for s in cached],
        "cached_cli_p50_s": round(statistics.median(cached_cli), 1),
        "cached_cli_samples_s": [round(s, 1) for s in cached_cli],
        "retry_samples_s": [round(s, 1) for s in retried],
        "start_latency_p50_s": round(statistics.median(started), 2),
        "start_latency_samples_s": [round(s, 2) for s in started],
        "cached_vs_cold": round(cached_p50 / cold, 3),
        "retry_vs_cold": round(retry_p50 / cold, 3),
    }
