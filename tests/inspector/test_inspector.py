"""The inspector's page data and file: which runs a folder holds, their verdicts (from their
own reward or an evaluation of their patch), their steps and edits, and a page that carries
everything inside it. The page in a real browser: tests/inspector/test_inspector_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from inspector_runs import A, B, C, RunFolder, make_run_folder

from sweflow.agent.runs.folder import find_runs
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory
from sweflow.errors import ConfigError
from sweflow.inspector import page_data, render, write_page
from sweflow.inspector.steps import edit_diff


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> RunFolder:
    return make_run_folder(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def data(runs: RunFolder) -> dict:
    return page_data(runs.root)


def by(data: dict, task: str, source: str, run: int = 0) -> dict:
    return next(
        r for r in data["runs"] if (r["task"], r["source"], r["run"]) == (task, source, run)
    )


def test_every_kind_of_run_folder_is_found(runs: RunFolder, data: dict) -> None:
    assert len(data["runs"]) == runs.runs
    sources = {r["source"] for r in data["runs"]}
    assert sources == {"collect", "infer", "rl/rollouts/step-0001", "rl/rollouts/step-0002"}
    rl = [r for r in data["runs"] if r["rl_step"] is not None]
    assert sorted((r["rl_step"], r["policy"]) for r in rl) == [(1, 0), (1, 0), (2, 1)]
    own = find_runs(runs.collect)  # a job's own folder
    assert len(own) == 4 and {r.source for r in own} == {"."}


def test_verdicts_come_from_the_reward_or_an_evaluation(runs: RunFolder, data: dict) -> None:
    words = [r["verdict"] for r in data["runs"]]
    assert {w: words.count(w) for w in set(words)} == runs.verdicts
    resolved = by(data, A, "collect")
    tests = resolved["grading"]["tests"]
    assert tests["FAIL_TO_PASS"]["passed"] == runs.rows[A].FAIL_TO_PASS[:6]
    assert tests["PASS_TO_PASS"]["failed"] == []
    unresolved = by(data, A, "collect", 1)
    assert len(unresolved["grading"]["tests"]["FAIL_TO_PASS"]["failed"]) == 5
    inferred = by(data, C, "infer")  # infer does not grade: eval/logs/... did
    assert inferred["verdict"] == "resolved"
    assert "run_evaluation" in inferred["grading"]["log_path"]
    assert inferred["grading"]["tests"]["FAIL_TO_PASS"]["passed"]
    rl = by(data, A, "rl/rollouts/step-0001", 1)
    assert rl["reward"] == pytest.approx(-0.1)  # RL's shaped reward, not 0/1


def test_a_refusal_shows_the_guards_reason(data: dict) -> None:
    refused = by(data, B, "collect")
    assert refused["verdict"] == "refused"
    assert refused["grading"]["refusal"]["status"] == "touches_tests"
    assert "conftest.py" in refused["grading"]["refusal"]["reason"]
    idle = by(data, B, "collect", 1)
    assert (idle["verdict"], idle["exit"], idle["patch"]) == ("empty", "step_limit", "")


def test_steps_carry_thoughts_actions_observations_and_edit_diffs(data: dict) -> None:
    run = by(data, A, "collect")
    assert run["steps"] == len(run["trace"]) == 6
    first = run["trace"][0]
    assert first["thought"].startswith("The failing tests")
    assert first["actions"][0]["line"].startswith("grep -n")
    assert "format[0]" in first["actions"][0]["observation"]  # what grep really printed
    edit = run["trace"][2]["actions"][0]
    assert edit["tool"] == "str_replace_editor"
    assert edit["diff"].startswith("--- a/parse.py\n+++ b/parse.py\n@@ str_replace @@")
    assert "+            else:\n" in edit["diff"]
    assert "--old_str" not in edit["line"]  # the diff shows the texts
    assert run["patch"].startswith("diff --git a/parse.py")
    assert "ValueError" in run["issue"]


def test_edit_diffs_of_create_insert_and_replace_lines() -> None:
    created = edit_diff(
        "str_replace_editor", {"command": "create", "path": "/t/a.py", "file_text": "x = 1\n"}
    )
    assert created == "--- /dev/null\n+++ b/t/a.py\n@@ -0,0 +1 @@\n+x = 1\n"
    inserted = edit_diff(
        "str_replace_editor",
        {"command": "insert", "path": "a.py", "insert_line": 3, "new_str": "y\nz"},
    )
    assert inserted == "--- a/a.py\n+++ b/a.py\n@@ -3,0 +4,2 @@\n+y\n+z\n"
    replaced = edit_diff(
        "str_replace_editor",
        {"command": "replace_lines", "path": "a.py", "line_range": [4, 6], "new_str": "w\n"},
    )
    assert replaced == "--- a/a.py\n+++ b/a.py\n@@ lines 4-6 replaced by @@\n+w\n"
    assert edit_diff("str_replace_editor", {"command": "view", "path": "a.py"}) is None
    assert edit_diff("bash", {"command": "ls"}) is None


def test_the_page_holds_everything_and_no_run_text_can_break_out(tmp_path: Path) -> None:
    hostile = "</script><script>document.title='owned'</script><!--"
    traj = Trajectory(
        instance_id="x__y-1",
        model="m",
        exit_status="submitted",
        messages=[{"role": "user", "content": hostile}],
        steps=[
            StepRecord(
                index=0,
                thought=hostile,
                actions=[ActionRecord(tool="bash", args={"command": "cat x"}, observation=hostile)],
            )
        ],
    )
    traj.save(tmp_path / "job" / "trajectories" / "x__y-1" / "run-0.json")
    out = tmp_path / "page.html"
    assert write_page(tmp_path / "job", out) == 1
    html = out.read_text()
    assert hostile not in html and "owned" in html  # there, but only as escaped JSON text
    assert html.count("</script>") == 2  # the data block's and the script's
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched
    assert "@import" not in html and "url(http" not in html
    blob = re.search(
        r'<script id="sweflow-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert json.loads(blob.group(1))["runs"][0]["trace"][0]["thought"] == hostile


def test_a_folder_without_runs_or_with_a_broken_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no saved runs"):
        find_runs(tmp_path)
    with pytest.raises(ConfigError, match="no such folder"):
        find_runs(tmp_path / "missing")
    bad = tmp_path / "trajectories" / "t" / "run-0.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=re.escape(str(bad))):
        find_runs(tmp_path)


def test_render_escapes_the_title(tmp_path: Path) -> None:
    html = render({"title": "<b>&", "folder": "/x", "generated": "", "version": "", "runs": []})
    assert "<title>&lt;b>&amp; · sweflow inspector</title>" in html


def test_the_pipeline_report_writes_and_links_the_page(runs: RunFolder, tmp_path: Path) -> None:
    from sweflow.pipeline.stages.report import inspector_page

    page = inspector_page(runs.root, tmp_path / "report" / "inspector.html")
    assert page is not None and page.runs == runs.runs and page.path.is_file()
    assert f"[Trajectory inspector]({page.path.as_uri()})" in page.markdown()
    assert inspector_page(tmp_path / "report", tmp_path / "other.html") is None  # no runs
