"""``sweflow eval`` on real environments: the harness's files and layout, resume, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sweflow.cli import app

LOGS = Path("logs") / "run_evaluation"


def test_eval_writes_the_harness_layout_and_resumes(grading_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first, second, third = grading_data.instances[:3]
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
        "eval", "--dataset", str(grading_data.dataset), "--predictions", str(preds),
        "--run-id", "r1", "--store", str(grading_data.store), "--report-dir", "reports",
        "--repo-mirror", str(grading_data.builder.options.repo_mirror),
    ]  # fmt: skip
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
    }  # did not apply: no report, an error instance (as in the harness)
    assert (LOGS / "r1" / "run.json").exists()
    summary = json.loads(Path("reports/org__m.r1.json").read_text())
    assert summary["schema_version"] == 2
    assert summary["resolved_ids"] == [first.instance_id]
    assert summary["empty_patch_ids"] == [second.instance_id]
    assert summary["error_ids"] == [third.instance_id]
    assert summary["total_instances"] == len(grading_data.instances)
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
    grading_data, tmp_path, monkeypatch
) -> None:
    """Refusals were reported as "error", wrote no logs and were graded again on a re-run."""
    monkeypatch.chdir(tmp_path)
    first = grading_data.instances[0]
    preds = tmp_path / "preds.jsonl"
    hack = first.patch + first.test_patch  # it edits the tests
    preds.write_text(json.dumps({"instance_id": first.instance_id, "model_name_or_path": "m",
                                 "model_patch": hack}) + "\n")  # fmt: skip
    argv = ["eval", "-d", str(grading_data.dataset), "-p", str(preds), "--run-id", "g",
            "--store", str(grading_data.store), "-i", first.instance_id,
            "--tamper-guard"]  # fmt: skip
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
