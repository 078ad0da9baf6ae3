"""sweflow bench synth --report: the throughput figures of a finished synthesis, from its report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sweflow.bench.synth import from_report

ROOT = Path(__file__).resolve().parents[2]


def test_a_report_gives_throughput_yield_and_the_split(tmp_path: Path) -> None:
    report = tmp_path / "tasks.report.json"
    shutil.copy(ROOT / "data" / "demo" / "tasks.report.json", report)
    (tmp_path / "split.json").write_text(json.dumps({"by": "repo", "eval": ["pypi/toolz"]}))
    figures = from_report(report)
    rows = json.loads(report.read_text())
    assert figures["valid_tasks"] == sum(len(r["tasks"]) for r in rows) == 36
    assert figures["split"] == {
        "by": "repo",
        "eval": ["pypi/toolz"],
        "train_tasks": 24,
        "heldout_tasks": 12,
        "train_projects": 2,
        "heldout_projects": 1,
    }
    per_op = figures["per_operator"]
    assert sum(r["valid"] for r in per_op.values()) == 36
    assert sum(r["candidates"] for r in per_op.values()) == figures["candidates_tried"]
    assert all(0 <= r["yield"] <= 1 for r in per_op.values())
    parse = figures["projects"]["pypi/parse"]
    assert parse["valid_per_min_total"] > 0 and parse["suite_seconds"] == rows[0]["clean_seconds"]
    assert "arXiv:2504.21798" in figures["swe_smith"]["source"]
