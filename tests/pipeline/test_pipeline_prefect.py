"""The Prefect pipeline on a real server: deploy, a worker, end-to-end runs, cache and a retry.

A `prefect server` (SQLite, its own PREFECT_HOME), the process work pool, the deployments of
deployments/prefect.yaml and a worker are started here and stopped by PID at the end. The
pipeline runs on two demo tasks, offline, with a scripted model that replays each gold patch
(the agent stages' success path); every stage's outputs and artifacts are checked, a second run
must be all Cached, and an injected fault followed by `prefect flow-run retry` must re-run only
the failed stage. Every run reports to a real MLflow server (tests/tracking_servers.py): one
MLflow run per flow run, named after it, linked from the stage reports.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from deployments.local import LocalPrefect
from sweflow.instances import load_instances
from sweflow.ports import free_port
from sweflow.testing.scripted_model import gold_replay, scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]
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
def config(
    tmp_path_factory, tasks, model_url, wheelhouse: Path, bookworm_rootfs: Path, mlflow_uri: str
) -> dict:
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
        "tracking": {"mlflow": {"tracking_uri": mlflow_uri, "experiment": "ci"}},
    }


def _run(
    stack: LocalPrefect, deployment: str, config: dict, lines: list[str] | None = None
) -> tuple[int, str, float]:
    start = time.monotonic()
    params = ("--params", json.dumps({"config": config}))
    code, run_id = stack.run(deployment, *params, out=(lines if lines is not None else []).append)
    assert run_id, "no flow run id in the output of `prefect deployment run`"
    return code, run_id, time.monotonic() - start


@pytest.fixture(scope="module")
def cold_run(stack, config):
    lines: list[str] = []
    code, run_id, seconds = _run(stack, "end-to-end/demo", config, lines)
    print(f"cold end-to-end run: {seconds:.1f} s", *lines, sep="\n")
    assert code == 0, (stack.state / "worker.log").read_text()[-4000:]
    return run_id, lines


def test_the_watch_prints_a_line_per_stage_start_and_end(cold_run) -> None:
    """What the demo prints while it runs: each stage started, then ended with its state,
    seconds and key figure; no event lines, no UUID but the flow run's own."""
    run_id, lines = cold_run
    stage_lines = lines[1:-1]
    assert lines[0].startswith(f"flow run {run_id}") and lines[-1] == "flow run Completed"
    for stage in STAGES:
        mine = [line.split() for line in stage_lines if line.split()[0] == stage]
        assert [words[1] for words in mine] == ["started", "Completed"], (stage, stage_lines)
        assert float(mine[1][2]) > 0 and mine[1][3] == "s" and len(mine[1]) > 4, mine[1]
    assert len(stage_lines) == 2 * len(STAGES)
    assert not any(re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", line) for line in stage_lines)


def test_every_stage_writes_its_outputs_and_artifacts(stack, config, cold_run, tasks) -> None:
    cold_run, _ = cold_run
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


def test_the_run_reports_to_one_mlflow_run_named_after_its_flow_run(
    stack, cold_run, mlflow_uri, tmp_path
) -> None:
    from mlflow.tracking import MlflowClient

    flow_run_id, _ = cold_run
    flow_run = stack.api(f"flow_runs/{flow_run_id}")
    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("ci")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.`sweflow.run_key` = '{flow_run_id}'"
    )
    assert len(runs) == 1, "one flow run, one tracking run"
    run = runs[0]
    assert run.info.run_name == flow_run["name"] and run.info.status == "FINISHED"  # type: ignore
    assert run.data.metrics["evaluate/resolved_instances"] == 2
    assert {name.split("/")[0] for name in run.data.metrics} == set(STAGES)
    reports = Path(client.download_artifacts(run.info.run_id, "evaluate", str(tmp_path)))
    assert "resolved" in (reports / "report.md").read_text()
    artifacts = stack.api(
        "artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    )
    by_key = {a["key"]: a["data"] for a in artifacts}  # type: ignore[union-attr]
    page = f"{mlflow_uri}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}"
    assert page in by_key["ci-tracking"] and page in by_key["ci-evaluate-report"]


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
