"""Runs in the formats others read, checked against those formats' documented layout and,
where a fetched mirror of the reader is at hand, by the reader's own code:

- SWE-agent trajectories (``.traj``; sweagent/types.py and agents.py ``get_trajectory_data``),
  loaded by SWE-agent's inspector (``sweagent/inspector/server.py: load_content``);
- a SWE-bench submission folder (the experiments repository's README and
  ``analysis/get_results.py`` / ``get_leaderboard.py``), whose predictions sb-cli's own
  ``process_predictions`` (``sb_cli/submit.py``) accepts.

The mirrors (``fetch`` of SWE-agent/SWE-agent and swe-bench/sb-cli) live outside the project,
under /work/.mirror or ``$SWEFLOW_MIRRORS``; a test that needs one skips, saying so, without.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from inspector_runs import A, B, C, RunFolder, make_run_folder
from typer.testing import CliRunner

from sweflow.agent.runs.folder import find_runs
from sweflow.agent.runs.submission import SubmissionInfo, single_source, write_submission
from sweflow.agent.runs.swe_agent import exit_status, swe_agent_traj, write_trajs
from sweflow.cli import app
from sweflow.errors import ConfigError
from sweflow.grading.logs import EvaluationLogs

MIRRORS = Path(os.environ.get("SWEFLOW_MIRRORS", "/work/.mirror"))
STEP_KEYS = {  # sweagent/types.py TrajectoryStep
    "action",
    "observation",
    "response",
    "state",
    "thought",
    "execution_time",
    "query",
    "extra_info",
}
ALLOWED = {  # what analysis/get_results.py keeps of a submission (it deletes the rest)
    "preds.json",
    "all_preds.jsonl",
    "logs",
    "metadata.yaml",
    "metadata.yml",
    "trajs",
    "README.md",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> RunFolder:
    return make_run_folder(tmp_path_factory.mktemp("runs"))


def mirror_module(tmp_path: Path, repo: str, package: str, module: str, root: str = ""):
    """``module`` of a fetched mirror's folder ``package``, extracted outside the project and
    imported with ``root`` (a folder of it) on the path."""
    git_dir = MIRRORS / repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        reason = f"no mirror of {repo} at {git_dir} (fetch it to compare with its own code)"
        print(f"skipped: {reason}")
        pytest.skip(reason)
    out = tmp_path / repo.replace("/", "+")
    out.mkdir()
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "HEAD", package],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    where = str(out / root)
    sys.path.insert(0, where)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(where)


# -- SWE-agent trajectories ---------------------------------------------------------------------


def test_a_run_as_a_swe_agent_trajectory(runs: RunFolder) -> None:
    found = {
        (r.source, r.trajectory.instance_id, r.trajectory.run): r for r in find_runs(runs.root)
    }
    traj = found[("collect", A, 0)].trajectory
    data = swe_agent_traj(traj)
    assert set(data) == {"environment", "trajectory", "history", "info", "replay_config"}
    assert len(data["trajectory"]) == len(traj.steps)
    for step, record in zip(data["trajectory"], traj.steps, strict=True):
        assert set(step) == STEP_KEYS
        assert step["thought"] == record.thought
        assert step["observation"] == record.actions[0].observation
    assert data["trajectory"][0]["action"].startswith("grep -n")
    assert data["trajectory"][0]["query"] == traj.messages[:2]  # system + the task
    assert data["trajectory"][2]["action"].startswith("str_replace_editor str_replace parse.py")
    assistant = [h for h in data["history"] if h["role"] == "assistant"]
    assert len(assistant) == len(traj.steps)
    assert all(h["message_type"] == "action" and "action" in h for h in assistant)
    tools = [h for h in data["history"] if h["role"] == "tool"]
    assert all(h["tool_call_ids"] and h["message_type"] == "observation" for h in tools)
    info = data["info"]
    assert (info["exit_status"], info["submission"]) == ("submitted", traj.patch)
    stats = info["model_stats"]
    assert (stats["tokens_sent"], stats["tokens_received"]) == (
        traj.prompt_tokens,
        traj.completion_tokens,
    )
    assert stats["api_calls"] == len(traj.steps)
    idle = found[("collect", B, 1)].trajectory  # out of steps, nothing changed
    assert exit_status(idle) == "exit_cost"
    assert swe_agent_traj(idle)["info"]["submission"] is None


def test_traj_files_are_named_as_swe_agent_names_them(runs: RunFolder, tmp_path: Path) -> None:
    paths = write_trajs(find_runs(runs.root), tmp_path)
    relative = sorted(p.relative_to(tmp_path).as_posix() for p in paths)
    assert f"infer/{C}/{C}.traj" in relative
    assert f"collect/run-1/{A}/{A}.traj" in relative
    assert f"rl/rollouts/step-0001/episode-001/{A}/{A}.traj" in relative
    assert all(Path(p).stem == Path(p).parent.name for p in relative)  # the stem is the task
    one_job = write_trajs(find_runs(runs.infer), tmp_path / "one")
    assert [p.relative_to(tmp_path / "one").as_posix() for p in one_job] == [f"{C}/{C}.traj"]


def test_swe_agents_own_inspector_reads_the_traj(runs: RunFolder, tmp_path: Path) -> None:
    inspector = "sweagent/inspector"
    server = mirror_module(tmp_path, "SWE-agent/SWE-agent", inspector, "server", inspector)
    found = [r for r in find_runs(runs.root) if r.source == "collect"]
    for run, path in zip(found, write_trajs(found, tmp_path / "trajs"), strict=True):
        content = server.load_content(str(path), {}, {})
        traj = run.trajectory
        steps = content["trajectory"]
        # its own additions: the evaluation report first and last, the problem statement, and
        # the submission when the run submitted one
        submitted = 1 if traj.patch.strip() else 0
        assert len(steps) == len(traj.steps) + 3 + submitted
        assert steps[1]["observation"] == traj.messages[1]["content"]
        summary = content["history"][0]["content"]
        assert summary.count("Step ") == len(traj.steps)
        assert server.get_status(path).startswith("❓")  # no results.json beside it


# -- SWE-bench submission -----------------------------------------------------------------------


def submission(runs: RunFolder, out: Path):
    info = SubmissionInfo("sweflow demo", "scripted", site="https://example.org", org="sweflow")
    trajs = single_source(find_runs(runs.collect))
    return write_submission(trajs, out, info, EvaluationLogs([runs.root]))


def test_the_submission_folder_has_the_documented_layout(runs: RunFolder, tmp_path: Path) -> None:
    out = tmp_path / "evaluation" / "lite" / "20261125_sweflow_demo"
    summary = submission(runs, out)
    assert {p.name for p in out.iterdir()} <= ALLOWED
    assert {"all_preds.jsonl", "metadata.yaml", "README.md", "trajs", "logs"} <= {
        p.name for p in out.iterdir()
    }
    preds = [json.loads(line) for line in (out / "all_preds.jsonl").read_text().splitlines()]
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in preds)
    assert sorted(p["instance_id"] for p in preds) == sorted({A, B})  # each task once
    assert {p["model_name_or_path"] for p in preds} == {"scripted"}
    for pred in preds:
        iid = pred["instance_id"]
        logs = out / "logs" / iid
        assert (logs / "patch.diff").read_text() == pred["model_patch"]
        assert (logs / "report.json").is_file()
        assert not (logs / "run_instance.log").exists()  # get_results deletes it
        traj = json.loads((out / "trajs" / f"{iid}.traj").read_text())
        assert traj["info"]["submission"] == pred["model_patch"]
    assert (out / "logs" / A / "test_output.txt").is_file()  # get_results re-grades from it
    meta = yaml.safe_load((out / "metadata.yaml").read_text())
    assert meta["info"]["name"] == "sweflow demo"  # get_leaderboard.py: metadata["info"]["name"]
    assert meta["info"]["site"] == "https://example.org"
    for key in ("checked", "os_model", "os_system"):  # metadata["tags"].get(key, False)
        assert isinstance(meta["tags"][key], bool)
    assert meta["tags"]["system"]["attempts"] == 2  # two runs a task: not pass@1, said so
    date = out.name.split("_", 1)[0]
    assert len(date) == 8 and date.isdigit()  # get_leaderboard asserts an 8-digit date
    assert (summary.predictions, summary.with_logs, summary.resolved) == (2, 2, 1)
    assert "get_results" in (out / "README.md").read_text()


def test_sb_cli_accepts_the_predictions(runs: RunFolder, tmp_path: Path) -> None:
    out = tmp_path / "20261125_sweflow_demo"
    submission(runs, out)
    submit = mirror_module(tmp_path, "swe-bench/sb-cli", "sb_cli", "sb_cli.submit")
    preds = submit.process_predictions(str(out / "all_preds.jsonl"), None)
    assert sorted(p["instance_id"] for p in preds) == sorted({A, B})


def test_a_bad_submission_is_refused_before_anything_is_written(
    runs: RunFolder, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="YYYYMMDD"):
        submission(runs, tmp_path / "sweflow_demo")
    assert not (tmp_path / "sweflow_demo").exists()
    with pytest.raises(ConfigError, match="runs of 4 jobs"):
        single_source(find_runs(runs.root))


def test_export_commands(runs: RunFolder, tmp_path: Path) -> None:
    cli = CliRunner()
    done = cli.invoke(app, ["export", "traj", str(runs.infer), str(tmp_path / "trajs")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "trajs" / C / f"{C}.traj").is_file()
    out = tmp_path / "20261125_demo"
    args = ["export", "submission", str(runs.infer), str(out), "-m", "scripted", "--name", "demo"]
    done = cli.invoke(app, args, env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "1 predictions were never graded" in done.output  # its evaluation is in eval/
    assert not (out / "logs").exists()
    done = cli.invoke(app, [*args, "--eval", str(runs.root / "eval")], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert (out / "logs" / C / "report.json").is_file()
    bad = cli.invoke(app, [*args[:3], str(tmp_path / "demo"), *args[4:]])
    assert bad.exit_code == 2 and "YYYYMMDD" in bad.output
    assert not (tmp_path / "demo").exists()
