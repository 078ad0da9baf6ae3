"""Pipeline benchmark: `end-to-end/demo` on a real Prefect server, cold, cached and retried.

``python benchmarks/prefect_pipeline.py [--tasks N] [--reps R]`` starts a private `prefect server`
and process worker (deployments/local.py: own PREFECT_HOME, a free port, stopped by PID), deploys
deployments/prefect.yaml and runs `end-to-end/demo` on N demo tasks (taken from each project in
turn; default 3) with a scripted model replaying their gold fixes, offline from the wheelhouse of
scripts/prefetch.py:

- ``cold_s``: the first run, in a fresh run directory (builds, validates, agents, grading),
  from submit to Completed on the server;
- ``cached_p50_s``: R re-runs with the same config (every stage must come back Cached), from
  submit to Completed on the server; ``cached_cli_p50_s``: the same re-runs as the wall time of
  `prefect deployment run --watch`, which adds the CLI's start and its fixed 3 s wait for
  straggler logs after the run ends;
- ``retry_p50_s``: R times, a run whose `evaluate` fails by an injected fault, then
  `prefect flow-run retry`: the retry's wall time (the done stages must come back Cached);
- ``start_latency_p50_s``: R runs of the stage deployment `evaluate/demo` on the same config
  (Cached), from submit to Running (the flow run's created and start times on the server), as a
  user re-running one stage from the UI waits for it.

``retry_p50_s`` is the wall time of `prefect flow-run retry` until the run is final; the ratios
are against the cold run of the same invocation.
Prints one JSON object.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # deployments/ is not installed

from deployments.local import LocalPrefect  # noqa: E402
from sweflow.agent.scripted import gold_replay, scripted_endpoint  # noqa: E402
from sweflow.bench import DEMO, WHEELHOUSE  # noqa: E402
from sweflow.grading.dataset import GradingData  # noqa: E402
from sweflow.ports import free_port  # noqa: E402

STAGES = ["build_envs", "validate_envs", "collect_trajectories", "infer", "evaluate"]


def _timed_run(stack: LocalPrefect, config: dict) -> tuple[int, str, float]:
    start = time.monotonic()
    code, run_id = stack.run("end-to-end/demo", "--params", json.dumps({"config": config}),
                             capture=True)  # fmt: skip
    if not run_id:
        raise RuntimeError("no flow run id in the output of `prefect deployment run`")
    return code, run_id, time.monotonic() - start


def _expect(states: dict[str, str], wanted: dict[str, str], what: str) -> None:
    if states != wanted:
        raise RuntimeError(f"{what}: task states {states}, expected {wanted}")


def main(args: list[str]) -> dict:
    n_tasks = int(args[args.index("--tasks") + 1]) if "--tasks" in args else 3
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 3
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-pipeline-") as tmp_dir:
        tmp = Path(tmp_dir)
        tasks = GradingData.load(DEMO, tmp / "unused-store", WHEELHOUSE).sample(n_tasks)
        script = tmp / "script.json"
        script.write_text(json.dumps(gold_replay(tasks)))
        stack = LocalPrefect(tmp / "prefect", port=free_port())
        with scripted_endpoint(script) as (url, _proc):
            try:
                print("starting prefect server, worker, deployments", file=sys.stderr)
                stack.up()
                config = {
                    "name": "bench",
                    "run_dir": str(tmp / "run"),
                    "retries": 0,
                    "stages": STAGES,
                    "dataset": {"path": str(DEMO), "instances": [t.instance_id for t in tasks]},
                    "envs": {"wheelhouse": str(WHEELHOUSE)},
                    "model": {"url": url, "name": "scripted"},
                    "agent": {"tool_mode": "text", "max_steps": 5},
                    "collect": {"rollouts": 1, "limit": n_tasks},
                    "infer": {"limit": n_tasks},
                    "eval": {"run_id": "bench"},
                }
                code, run_id, _ = _timed_run(stack, config)
                if code != 0:
                    raise RuntimeError(f"cold run failed: {stack.state / 'worker.log'}")
                _expect(stack.task_states(run_id), dict.fromkeys(STAGES, "Completed"), "cold")
                cold = stack.since_submit(run_id, "end_time")
                print(f"cold: {cold:.1f} s", file=sys.stderr)
                cached, cached_cli, retried, started = [], [], [], []
                for rep in range(reps):
                    code, run_id, seconds = _timed_run(stack, config)
                    _expect(stack.task_states(run_id), dict.fromkeys(STAGES, "Cached"), "cached")
                    cached.append(stack.since_submit(run_id, "end_time"))
                    cached_cli.append(seconds)
                    faults = tmp / "run" / ".faults"
                    faults.mkdir(exist_ok=True)
                    (faults / "evaluate").touch()
                    code, run_id, _ = _timed_run(stack, {**config, "force": ["evaluate"]})
                    if code == 0:
                        raise RuntimeError("the injected evaluate fault did not fail the run")
                    start = time.monotonic()
                    stack.prefect("flow-run", "retry", run_id)
                    final = stack.wait(run_id, timeout=600)
                    retried.append(time.monotonic() - start)
                    after = {**dict.fromkeys(STAGES[:-1], "Cached"), "evaluate": "Completed"}
                    _expect(stack.task_states(run_id) | {"final": final},
                            after | {"final": "Completed"}, "retry")  # fmt: skip
                    params = json.dumps({"config": config})
                    code, run_id = stack.run("evaluate/demo", "--params", params, capture=True)
                    if code != 0 or not run_id:
                        raise RuntimeError("the evaluate/demo stage run failed")
                    started.append(stack.since_submit(run_id))
                    print(f"rep {rep}: cached {cached[-1]:.1f} s ({seconds:.1f} s by the CLI), "
                          f"retry {retried[-1]:.1f} s, "
                          f"stage start {started[-1]:.1f} s", file=sys.stderr)  # fmt: skip
            finally:
                stack.down()
    cached_p50, retry_p50 = statistics.median(cached), statistics.median(retried)
    return {
        "tasks": n_tasks,
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


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
