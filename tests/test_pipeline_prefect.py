"""The Prefect pipeline on a real server: deploy, a worker, end-to-end runs, cache and a retry.

A `prefect server` (SQLite, its own PREFECT_HOME), the process work pool, the deployments of
deployments/prefect.yaml and a worker are started here and stopped by PID at the end. The
pipeline runs on two demo tasks, offline, with a scripted model that replays each gold patch
(the agent stages' success path); every stage's outputs and artifacts are checked, a second run
must be all Cached, and an injected fault followed by `prefect flow-run retry` must re-run only
the failed stage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from deployments.local import LocalPrefect
from sweflow.agent.scripted import gold_replay, scripted_endpoint
from sweflow.instances import load_instances
from sweflow.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "data" / "demo" / "tasks.jsonl"
STAGES = ["build_envs", "validate_envs", "collect_trajectories", "infer", "evaluate"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prefect = LocalPrefect(tmp_path_factory.mktemp("prefect"), port=free_port())
    try:
        prefect.up()
        yield prefect
    finally:
        prefect.down()


@pytest.fixture(scope="module")
def tasks():
    rows = load_instances(DEMO).raise_for_errors()
    return [next(r for r in rows if r.repo == repo) for repo in ("pypi/parse", "pypi/cachetools")]


@pytest.fixture(scope="module")
def model_url(tmp_path_factory, tasks):
    script = tmp_path_factory.mktemp("model") / "script.json"
    script.write_text(json.dumps(gold_replay(tasks)))
    with scripted_endpoint(script) as (url, _proc):
        yield url


@pytest.fixture(scope="module")
def config(tmp_path_factory, tasks, model_url, wheelhouse: Path, bookworm_rootfs: Path) -> dict:
    return {
        "name": "ci",
        "run_dir": str(tmp_path_factory.mktemp("run")),
        "retries": 0,
        "stages": STAGES,
        "dataset": {"path": str(DEMO), "instances": [t.instance_id for t in tasks]},
        "envs": {"wheelhouse": str(wheelhouse)},
        "model": {"url": model_url, "name": "scripted"},
        "agent": {"tool_mode": "text", "max_steps": 5},
        "collect": {"rollouts": 1, "limit": 2},
        "infer": {"limit": 2},
        "eval": {"run_id": "ci"},
    }


def _run(stack: LocalPrefect, deployment: str, config: dict) -> tuple[int, str, float]:
    start = time.monotonic()
    code, run_id = stack.run(deployment, "--params", json.dumps({"config": config}), capture=True)
    assert run_id, "no flow run id in the output of `prefect deployment run`"
    return code, run_id, time.monotonic() - start


@pytest.fixture(scope="module")
def cold_run(stack, config):
    code, run_id, seconds = _run(stack, "end-to-end/demo", config)
    print(f"cold end-to-end run: {seconds:.1f} s")
    assert code == 0, (stack.state / "worker.log").read_text()[-4000:]
    return run_id


def test_every_stage_writes_its_outputs_and_artifacts(stack, config, cold_run, tasks) -> None:
    assert stack.task_states(cold_run) == dict.fromkeys(STAGES, "Completed")
    run_dir = Path(config["run_dir"])
    validated = (run_dir / "validate" / "validated.jsonl").read_text().splitlines()
    assert len(validated) == 2
    sft = (run_dir / "collect" / "sft.jsonl").read_text().splitlines()
    assert len(sft) == 2  # both replays resolved and kept
    preds = json.loads((run_dir / "infer" / "preds.json").read_text())
    assert {p["instance_id"] for p in preds} == {t.instance_id for t in tasks}
    report = json.loads((run_dir / "eval" / "scripted.ci.json").read_text())
    assert report["schema_version"] == 2 and report["resolved_instances"] == 2
    artifacts = stack.api("artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [cold_run]}}})
    kinds = {(a["key"], a["type"]) for a in artifacts}  # type: ignore[union-attr]
    for stage in STAGES:
        key = f"ci-{stage.replace('_', '-')}"
        assert (key, "table") in kinds and (f"{key}-report", "markdown") in kinds, stage
    assert sum(a["type"] == "progress" for a in artifacts) == len(STAGES)  # type: ignore
    tables = [a for a in artifacts if a["type"] == "table"]  # type: ignore[index]
    assert all("{" not in a["description"] for a in tables), [a["description"] for a in tables]


def test_a_second_run_is_all_cached(stack, config, cold_run) -> None:
    code, run_id, seconds = _run(stack, "end-to-end/demo", config)
    print(f"cached end-to-end run: {seconds:.1f} s")
    assert code == 0
    assert stack.task_states(run_id) == dict.fromkeys(STAGES, "Cached")


def test_a_failed_stage_is_retried_alone(stack, config, cold_run) -> None:
    forced = {**config, "force": ["evaluate"]}
    faults = Path(config["run_dir"]) / ".faults"
    faults.mkdir(exist_ok=True)
    (faults / "evaluate").touch()
    code, run_id, _ = _run(stack, "end-to-end/demo", forced)
    assert code != 0
    states = stack.task_states(run_id)
    assert states["evaluate"] == "Failed"
    assert all(states[s] == "Cached" for s in STAGES[:-1])
    start = time.monotonic()
    stack.prefect("flow-run", "retry", run_id)  # scheduled again: the worker picks it up
    assert stack.wait(run_id, timeout=600) == "Completed"
    print(f"retry after the failure: {time.monotonic() - start:.1f} s")
    states = stack.task_states(run_id)
    assert states["evaluate"] == "Completed"
    assert all(states[s] == "Cached" for s in STAGES[:-1])


def test_a_stage_deployment_reruns_one_stage(stack, config, cold_run) -> None:
    code, run_id, _ = _run(stack, "evaluate/demo", {**config, "force": ["evaluate"]})
    assert code == 0
    upstream = ["build_envs", "validate_envs", "infer"]  # evaluate does not read collect's
    assert stack.task_states(run_id) == {
        **dict.fromkeys(upstream, "Cached"),
        "evaluate": "Completed",
    }
