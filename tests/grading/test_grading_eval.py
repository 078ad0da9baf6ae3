"""``sweflow eval`` on real environments: the harness's files and layout, resume, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import SLEEPY_PATCH
from typer.testing import CliRunner

from sweflow.cli import app

LOGS = Path("logs") / "run_evaluation"


def test_eval_writes_the_harness_layout_and_resumes(
    grading_data, grading_store, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second, third = grading_data.rows[:3]
    rows = [
        {
            "instance_id": first.instance_id,
            "model_patch": first.patch,
            "model_name_or_path": "org/m",
        },
        {"instance_id": second.instance_id, "model_patch": "", "model_name_or_path": "org/m"},
        {"instance_id": third.instance_id, "model_patch": "oops\n", "model_name_or_path": "org/m"},
        {"instance_id": "not-there", "model_patch": "x", "model_name_or_path": "org/m"},
    ]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "eval",
        "--dataset",
        str(grading_data.name),
        "--predictions",
        str(preds),
        "--run-id",
        "r1",
        "--store",
        str(grading_store),
        "--report-dir",
        "reports",
        "--repo-mirror",
        str(grading_data.source.mirror),
    ]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # rich wraps lines at the terminal's width
    assert "row 3: instance_id: not-there is not in the dataset" in said
    run = LOGS / "r1" / "org__m"
    files = {p.name for p in (run / first.instance_id).iterdir()}
    assert files == {"report.json", "test_output.txt", "patch.diff", "eval.sh", "run_instance.log"}
    assert not (run / second.instance_id).exists()  # empty patches are not run
    assert {p.name for p in (run / third.instance_id).iterdir()} == {
        "patch.diff",
        "run_instance.log",
        "sweflow_verdict.json",
    }  # did not apply: no report, an error instance (as in the harness); its verdict kept
    assert (LOGS / "r1" / "run.json").exists()
    summary = json.loads(Path("reports/org__m.r1.json").read_text())
    assert summary["schema_version"] == 2
    assert summary["resolved_ids"] == [first.instance_id]
    assert summary["empty_patch_ids"] == [second.instance_id]
    assert summary["error_ids"] == [third.instance_id]
    assert summary["total_instances"] == len(grading_data.rows)
    assert f"| {first.instance_id} | org/m | resolved |" in Path("reports/org__m.r1.md").read_text()

    report = run / first.instance_id / "report.json"
    before = report.stat().st_mtime_ns
    again = CliRunner().invoke(app, argv)
    assert again.exit_code == 0, again.output
    assert report.stat().st_mtime_ns == before  # resumed: not graded again
    assert "cached" in again.output
    assert json.loads(Path("reports/org__m.r1.json").read_text()) == summary

    # the same run id with a changed prediction: graded anew, never the earlier report
    rows[0]["model_patch"] = "garbage\n"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    changed = CliRunner().invoke(app, argv)
    assert changed.exit_code == 0, changed.output
    assert (run / first.instance_id / "patch.diff").read_text() == "garbage\n"
    assert not (run / first.instance_id / "report.json").exists()  # did not apply
    summary = json.loads(Path("reports/org__m.r1.json").read_text())
    assert summary["resolved_ids"] == []
    assert summary["error_ids"] == sorted([first.instance_id, third.instance_id])


def test_a_patch_the_tamper_guard_refuses_is_unresolved_logged_and_resumed(
    grading_data, grading_store, tmp_path, monkeypatch
) -> None:
    """Refusals were reported as "error", wrote no logs and were graded again on a re-run."""
    monkeypatch.chdir(tmp_path)
    first = grading_data.rows[0]
    preds = tmp_path / "preds.jsonl"
    hack = first.patch + first.test_patch  # it edits the tests
    preds.write_text(
        json.dumps(
            {"instance_id": first.instance_id, "model_name_or_path": "m", "model_patch": hack}
        )
        + "\n"
    )
    argv = [
        "eval",
        "-d",
        str(grading_data.name),
        "-p",
        str(preds),
        "--run-id",
        "g",
        "--store",
        str(grading_store),
        "-i",
        first.instance_id,
        "--tamper-guard",
    ]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    summary = json.loads(Path("m.g.json").read_text())
    assert summary["unresolved_ids"] == [first.instance_id] and not summary["error_ids"]
    run = LOGS / "g" / "m" / first.instance_id
    assert json.loads((run / "report.json").read_text())[first.instance_id]["refused"] == (
        "touches_tests"
    )
    assert "Refused by the tamper guard" in (run / "run_instance.log").read_text()
    again = CliRunner().invoke(app, argv)
    assert again.exit_code == 0 and "cached" in again.output, again.output


def test_a_hang_and_a_malformed_patch_are_verdicts_a_rerun_keeps(
    grading_data, grading_store, tmp_path, monkeypatch
) -> None:
    """A timed-out grading was graded again, in full, on every re-run (issue 54). A hang and a
    malformed patch are error instances, as the harness counts them (no report.json), with their
    reasons; a re-run takes their kept verdicts; a longer --timeout grades the hang again."""
    monkeypatch.chdir(tmp_path)
    first, second = grading_data.rows[:2]
    rows = [
        {"instance_id": first.instance_id, "model_patch": SLEEPY_PATCH, "model_name_or_path": "m"},
        {"instance_id": second.instance_id, "model_patch": "oops\n", "model_name_or_path": "m"},
    ]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [
        "eval",
        "-d",
        str(grading_data.name),
        "-p",
        str(preds),
        "--run-id",
        "h",
        "--store",
        str(grading_store),
        "-i",
        f"{first.instance_id},{second.instance_id}",
    ]

    def run(timeout: str) -> tuple[str, dict, dict[str, float]]:
        result = CliRunner().invoke(app, [*argv, "--timeout", timeout])
        assert result.exit_code == 0, result.output
        kept = {p.parent.name: p.stat().st_mtime_ns for p in (LOGS / "h" / "m").glob("*/*.json")}
        return " ".join(result.output.split()), json.loads(Path("m.h.json").read_text()), kept

    _, summary, kept = run("5")
    assert summary["error_ids"] == sorted([first.instance_id, second.instance_id])
    table = Path("m.h.md").read_text()
    assert "timed out: the eval script ran past 5 s" in table, table
    assert "the patch did not apply (malformed)" in table, table
    verdicts = {
        i: json.loads((LOGS / "h" / "m" / i / "sweflow_verdict.json").read_text())
        for i in (first.instance_id, second.instance_id)
    }
    assert verdicts[first.instance_id]["status"] == "timeout"
    assert verdicts[first.instance_id]["timeout_s"] == 5
    assert verdicts[second.instance_id]["status"] == "malformed"
    assert not list((LOGS / "h" / "m").glob("*/report.json"))  # as the harness writes none

    again, resumed, unchanged = run("5")
    assert unchanged == kept and again.count("cached") >= 2, again  # neither graded again
    assert resumed == summary
    _, _, longer = run("6")
    assert longer[first.instance_id] != kept[first.instance_id]  # the hang, under 6 s
    assert longer[second.instance_id] == kept[second.instance_id]
