"""Many samples per task on real demo tasks (toolz, the split the pipeline holds out), built
offline and graded by the guarded Grader: ``sweflow infer --samples 4`` against a scripted
model whose samples differ by their seed, as a served model's do at temperature 1.

Per task the four samples are (by the seeds of base seed ``BASE``): a wrong edit of the right
file, the gold fix with a reproduction script, the gold fix again, and an empty patch. The
reproduction script is the issue's expected behaviour as tests (the task's new test file run
by pytest.main: what a strong agent would write); a selector reads it only as a file the
sample's patch creates. So the first sample is wrong, the fix is the majority, the only patch
its reproduction passes and the one the scripted verifier says YES to; two of four resolve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unidiff import PatchSet

from sweflow.agent.runs.passk import pass_at_k
from sweflow.agent.runs.samples import Sampling
from sweflow.agent.trajectory import Trajectory, load_runs
from sweflow.bench import DEMO
from sweflow.cli import app
from sweflow.envcache.dataset import Dataset
from sweflow.instances import Instance
from sweflow.testing.scripted_model import scripted_endpoint

SAMPLES = 4
WRONG, FIX, EMPTY = 0, 1, 2
WANTED = [WRONG, FIX, FIX, EMPTY]  # the variant each sample draws
BASE = next(
    b for b in range(10_000) if [Sampling(1.0, b).seed_of(k) % 3 for k in range(4)] == WANTED
)
SUBMIT = {"content": "THOUGHT: done.\n\n```bash\nsubmit\n```"}


@dataclass(frozen=True)
class Built:
    """Tasks built into a store, offline from a wheelhouse."""

    instances: list[Instance]
    store: Path
    wheelhouse: Path


@pytest.fixture(scope="module")
def toolz(tmp_path_factory, wheelhouse: Path, bookworm_rootfs: Path) -> Built:
    """Two toolz tasks, built offline into a fresh store."""
    data = Dataset.load(DEMO)
    rows = [row for row in data.rows if row.repo == "pypi/toolz"][:2]
    store = tmp_path_factory.mktemp("tts-store")
    assert not [
        r for r in data.builder(store, wheelhouse=wheelhouse).build(rows) if r.status == "error"
    ]
    return Built(rows, store, wheelhouse)


def reproduction(row: Instance) -> str:
    """The task's new test file of its failing tests, run by itself: exit 0 only when the bug
    is fixed."""
    failing = row.FAIL_TO_PASS[0].split("::")[0]
    (tests,) = [f for f in PatchSet(row.test_patch) if f.path == failing]
    body = "".join(line.value for hunk in tests for line in hunk if line.is_added)
    return (
        body
        + '\n\nif __name__ == "__main__":\n    import sys, pytest\n'
        + ('    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))\n')
    )


def variants(row: Instance) -> list[list[dict]]:
    path = PatchSet(row.patch)[0].path
    wrong = f"THOUGHT: edit.\n\n```bash\nsed -i '1i # looked at this' {path}\n```"
    repro = f"cat > reproduce_issue.py <<'SWEFLOW_EOF'\n{reproduction(row)}SWEFLOW_EOF"
    fix = f"git apply <<'SWEFLOW_EOF'\n{row.patch}SWEFLOW_EOF"
    return [
        [{"content": wrong}, SUBMIT],
        [
            {"content": f"THOUGHT: reproduce.\n\n```bash\n{repro}\n```"},
            {"content": f"THOUGHT: fix.\n\n```bash\n{fix}\n```"},
            SUBMIT,
        ],
        [SUBMIT],
    ]


def first_added_line(patch: str) -> str:
    """The fix's first added line (its text, as the patch shows it)."""
    lines = patch.splitlines()
    return next(
        ln for ln in lines if ln.startswith("+") and not ln.startswith("+++") and ln[1:].strip()
    )


def script(path: Path, rows: list[Instance]) -> Path:
    """The verifier's answers first (YES to a sample with the fix, else NO), then the agent's
    samples per task."""
    yes = {"content": "YES", "top_logprobs": {"YES": -0.1, "NO": -2.4}}
    no = {"content": "NO", "top_logprobs": {"NO": -0.05, "YES": -3.0}}
    entries = [{"match": f"\n{first_added_line(r.patch)}\n", "turns": [yes]} for r in rows]
    entries.append({"match": "Does the patch resolve the issue?", "turns": [no]})
    entries += [{"match": r.problem_statement, "samples": variants(r)} for r in rows]
    path.write_text(json.dumps({"scripts": entries, "default": [SUBMIT]}))
    return path


def infer_args(data: Built, url: str, out: Path, *extra: str) -> list[str]:
    ids = [arg for row in data.instances for arg in ("-i", row.instance_id)]
    return [
        "infer",
        *(
            "-d",
            str(DEMO),
            "-s",
            str(data.store),
            "--wheelhouse",
            str(data.wheelhouse),
        ),
        *ids,
        *("--model-url", url, "-m", "scripted", "--tool-mode", "text", "-o", str(out)),
        *("--samples", str(SAMPLES), "--temperature", "1", "--seed", str(BASE)),
        *extra,
    ]


def test_samples_are_graded_and_each_selector_picks(toolz: Built, tmp_path: Path) -> None:
    out = tmp_path / "infer"
    with scripted_endpoint(script(tmp_path / "script.json", toolz.instances)) as (url, _):
        result = CliRunner().invoke(app, infer_args(toolz, url, out, "--predict", "tests"))
    assert result.exit_code == 0, result.output + repr(result.exception)

    runs = load_runs(out)
    assert len(runs) == 2 * SAMPLES
    for traj in runs:  # each sample drawn with its own recorded seed, and graded
        assert traj.sampling == Sampling(1.0, BASE).record(traj.run)
        assert traj.reward is not None, traj.error
        assert traj.resolved == (WANTED[traj.run] == FIX), (traj.run, traj.reward["reason"])

    report = json.loads((out / "samples.json").read_text())
    assert report["samples"] == SAMPLES and report["tasks"] == 2 and report["graded"] == 8
    for k in range(1, SAMPLES + 1):
        assert report["pass_at_k"][str(k)] == pytest.approx(round(pass_at_k(4, 2, k), 4))
    assert report["best_of_n"] == {"first": 0.0, "majority": 1.0, "tests": 1.0, "verifier": 1.0}
    assert report["oracle_pass_at_n"] == 1.0
    for task in report["per_task"]:
        assert task["picked"] == {"first": 0, "majority": 1, "tests": 1, "verifier": 1}

    tests = json.loads((out / "selections" / "tests.json").read_text())
    for entry in tests.values():
        scores = {int(k): v for k, v in entry["scores"].items()}
        assert scores[1]["scripts_passed"] == 1 and scores[0]["scripts_passed"] == 0
        assert scores[3]["has_change"] is False
    verifier = json.loads((out / "selections" / "verifier.json").read_text())
    for entry in verifier.values():
        yes = entry["scores"]
        assert yes["1"] == yes["2"] == pytest.approx(0.909, abs=1e-3) and yes["0"] < 0.06

    preds = json.loads((out / "preds.json").read_text())
    golds = {row.instance_id: row.patch for row in toolz.instances}
    assert [p["instance_id"] for p in preds] == list(golds)
    assert all(golds[p["instance_id"]] in p["model_patch"] for p in preds)  # the tests' pick
    assert "pass@1" in result.output and "best-of-4 tests" in result.output


def test_an_interrupted_sampling_run_resumes_sample_by_sample(toolz: Built, tmp_path: Path) -> None:
    out = tmp_path / "infer"
    with scripted_endpoint(script(tmp_path / "script.json", toolz.instances), latency_s=0.4) as (
        url,
        _,
    ):
        argv = [sys.executable, "-m", "sweflow.cli", *infer_args(toolz, url, out)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 600
            while not list(out.glob("trajectories/*/run-*.json")):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) != 0
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        kept = {p: Trajectory.load(p).started_at for p in out.glob("trajectories/*/run-*.json")}
        assert 0 < len(kept) < 2 * SAMPLES
        assert not (out / "samples.json").exists()

        result = CliRunner().invoke(app, infer_args(toolz, url, out))
    assert result.exit_code == 0, result.output + repr(result.exception)
    for path, started in kept.items():  # a saved sample is not drawn again
        assert Trajectory.load(path).started_at == started
    runs = load_runs(out)
    assert sorted((t.instance_id, t.run) for t in runs) == sorted(
        (row.instance_id, k) for row in toolz.instances for k in range(SAMPLES)
    )
    assert all(t.reward is not None for t in runs)
    assert json.loads((out / "samples.json").read_text())["graded"] == 2 * SAMPLES

    other = CliRunner().invoke(app, infer_args(toolz, url, out)[:-1] + [str(BASE + 1)])
    assert other.exit_code != 0 and "base seed" in other.output  # refused before any work


def test_the_pipeline_samples_picks_and_reports(
    toolz: Built, wheelhouse: Path, tmp_path: Path
) -> None:
    """infer.samples in the pipeline's stages: the samples graded, majority's picks graded
    again by evaluate (its samples report beside swebench's), the report's table."""
    from sweflow.pipeline.config import PipelineConfig
    from sweflow.pipeline.registry import BY_NAME
    from sweflow.pipeline.stages.common import StageContext

    ids = [row.instance_id for row in toolz.instances]
    results: dict[str, dict] = {}
    with scripted_endpoint(script(tmp_path / "script.json", toolz.instances)) as (url, _):
        config = PipelineConfig(
            name="tts",
            run_dir=tmp_path / "run",
            dataset={"path": DEMO, "instances": ids},
            envs={"wheelhouse": wheelhouse, "store": toolz.store},
            model={"url": url, "name": "scripted"},
            agent={"tool_mode": "text"},
            infer={"samples": SAMPLES, "seed": BASE, "predict": "majority"},
            eval={"run_id": "tts"},
        )
        for name in ("build_envs", "validate_envs", "infer", "evaluate", "report"):
            stage = BY_NAME[name]
            upstream = {u: results[u] for u in (*stage.upstream, *stage.after) if u in results}
            results[name] = stage.function()(StageContext(config, upstream)).to_dict()

    infer = results["infer"]
    assert infer["counts"]["samples"] == 2 * SAMPLES and infer["counts"]["resolved_samples"] == 4
    assert "| best-of-4 majority | 1.000 | 2 of 2 tasks |" in infer["markdown"]
    evaluated = results["evaluate"]
    assert evaluated["counts"]["resolved_instances"] == 2  # majority's picks: the fixes
    beside = Path(evaluated["outputs"]["samples"])
    assert beside.parent == Path(evaluated["outputs"]["report"]).parent
    figures = json.loads(beside.read_text())
    assert figures["evaluated"] == {"selector": "majority", "resolved": 2, "tasks": 2}
    assert figures["best_of_n"]["first"] == 0.0 and figures["oracle_pass_at_n"] == 1.0
    report = results["report"]
    assert "| pass@1 | 0.500 | 4 of 8 samples resolved |" in report["markdown"]
    assert "| oracle pass@4 | 1.000 | 2 of 2 tasks |" in report["markdown"]
    summary = json.loads(Path(report["outputs"]["summary"]).read_text())
    assert summary["samples"]["best_of_n"]["verifier"] == 1.0
    trained = summary["heldout"]["trained"]  # over every sample, as graded in infer
    assert (trained["runs"], trained["resolved"], trained["resolved_rate"]) == (8, 4, 0.5)
    assert "best-of-4 tests" in Path(report["outputs"]["text"]).read_text()
