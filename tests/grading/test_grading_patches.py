"""Patch classification, wrong-patch variants and prediction files: pure functions, real data."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from unidiff import PatchSet

from sweflow.grading.crosscheck import agreement_table
from sweflow.grading.evaluate import PredictionOutcome, markdown_summary
from sweflow.grading.patches import failure_kind, is_empty, is_test_path
from sweflow.grading.predictions import PredictionsError, load_predictions
from sweflow.grading.variants import MALFORMED, VARIANTS
from sweflow.instances import Instance, load_instances

DATASET = Path(__file__).parents[1] / "data" / "envcache" / "instances.jsonl"


@pytest.fixture(scope="module")
def instances() -> list[Instance]:
    return load_instances(DATASET).raise_for_errors()


def test_empty_and_test_paths() -> None:
    assert is_empty(None) and is_empty("") and is_empty("\n  \n")
    assert not is_empty("diff --git a/x b/x\n")
    for path in ("tests/test_more.py", "pkg/tests/data.json", "test_x.py", "a/x_test.py"):
        assert is_test_path(path), path
    for path in ("more_itertools/more.py", "docs/testing.rst", "contest.py"):
        assert not is_test_path(path), path


def test_failure_kinds() -> None:
    assert failure_kind(MALFORMED, "error: corrupt patch at line 6") == "malformed"
    binary = "diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n"
    assert failure_kind(binary, "error: cannot apply binary patch") == "binary"
    clean = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n"
    assert failure_kind(clean, "error: patch failed: a.py:1") == "failed"


def test_variants_are_real_diffs(instances) -> None:
    real = instances[0]

    def read(path: str) -> str:
        return "import x\n\ndef f():\n    pass\n"

    made = {name: make(real, read, [real]) for name, make in VARIANTS.items()}
    assert made["gold"] == real.patch and made["empty"] == ""
    reverted = PatchSet(made["revert_hunk"])
    assert sum(len(f) for f in reverted) == sum(len(f) for f in PatchSet(real.patch)) - 1
    broken = PatchSet(made["break"])
    assert [f.path for f in broken] == ["more_itertools/__init__.py"]
    assert str(broken[0][0]).startswith("@@ -1,3 +1,4 @@\n+raise ImportError")
    assert made["stale"] != real.patch and "# stale" in made["stale"]
    assert made["other_bug"] is None  # no other task of its repository


def test_other_bug_fixes_one_task_and_plants_another() -> None:
    fixed = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n"
    f_bug, g_bug = fixed.replace("x + 1", "x - 1"), fixed.replace("x * 2", "x * 3")

    def task(name: str, buggy: str) -> Instance:
        patch = "".join(
            difflib.unified_diff(buggy.splitlines(True), fixed.splitlines(True), "a/m.py", "b/m.py")
        )
        return Instance(
            instance_id=name,
            repo="o/r",
            base_commit="0" * 40,
            patch=f"diff --git a/m.py b/m.py\n{patch}",
        )

    f_task, g_task = task("o__r-f", f_bug), task("o__r-g", g_bug)
    made = VARIANTS["other_bug"](f_task, lambda path: {"m.py": f_bug}[path], [f_task, g_task])
    (edited,) = PatchSet(made)
    assert edited.path == "m.py"
    lines = [line for hunk in edited for line in hunk]
    assert {line.value for line in lines if line.is_removed} == {
        "    return x - 1\n",  # this task's bug, fixed
        "    return x * 2\n",
    }
    assert {line.value for line in lines if line.is_added} == {
        "    return x + 1\n",
        "    return x * 3\n",  # the other task's bug, planted
    }


def test_predictions_report_bad_rows_and_keep_the_others(instances, tmp_path: Path) -> None:
    ids = [i.instance_id for i in instances]
    rows = [
        {"instance_id": ids[0], "model_patch": "x", "model_name_or_path": "m"},
        {"instance_id": "nope", "model_patch": "", "model_name_or_path": "m"},
        {"instance_id": ids[1], "model_name_or_path": "m"},
        {"instance_id": ids[2], "model_patch": 3, "model_name_or_path": "m"},
        {"instance_id": ids[0], "model_patch": None, "model_name_or_path": "m"},
        {"instance_id": ids[3], "model_patch": None, "model_name_or_path": "m"},
    ]
    jsonl = tmp_path / "preds.jsonl"
    jsonl.write_text("\n".join([*map(json.dumps, rows), "{not json"]) + "\n")
    loaded = load_predictions(jsonl, instances)
    assert [p.instance_id for p in loaded.items] == [ids[0], ids[3]]
    assert loaded.errors == [
        "preds.jsonl: row 1: instance_id: nope is not in the dataset",
        "preds.jsonl: row 2: model_patch: missing",
        "preds.jsonl: row 3: model_patch: expected str or NoneType, got 3",
        f"preds.jsonl: row 4: instance_id: a second prediction for {ids[0]}",
        "preds.jsonl: row 6: not valid JSON: Expecting property name enclosed in double quotes:"
        " line 1 column 2 (char 1)",
    ]
    as_dict = tmp_path / "preds.json"
    as_dict.write_text(json.dumps({r["instance_id"]: r for r in rows[:1]}))
    assert [p.instance_id for p in load_predictions(as_dict, instances).items] == [ids[0]]
    gold = load_predictions("gold", instances).items
    assert [(p.model_name_or_path, p.model_patch) for p in gold[:1]] == [
        ("gold", instances[0].patch)
    ]
    with pytest.raises(PredictionsError, match="must be .json, .jsonl or 'gold'"):
        load_predictions(tmp_path / "preds.txt", instances)


def test_agreement_table_counts_disagreements() -> None:
    table, bad = agreement_table(
        {
            "local": {"gold": {"a": True, "b": True}},
            "harness": {"gold": {"a": True, "b": False}},
        }
    )
    assert bad == 1
    assert "| gold | a | resolved | resolved | yes |" in table
    assert "| gold | b | resolved | - | NO |" in table


def test_markdown_summary_has_counts_and_rows() -> None:
    report = {
        "total_instances": 2,
        "submitted_instances": 2,
        "completed_instances": 1,
        "resolved_instances": 1,
        "unresolved_instances": 0,
        "empty_patch_instances": 1,
        "error_instances": 0,
    }
    outcomes = [
        PredictionOutcome("b", "m", "empty", False, "empty patch"),
        PredictionOutcome("a", "m", "resolved", True, "resolved | all"),
    ]
    text = markdown_summary("r", report, outcomes)
    assert "| 2 | 2 | 1 | 1 | 0 | 1 | 0 |" in text
    assert text.index("| a | m | resolved") < text.index("| b | m | empty")
    assert "resolved \\| all" in text
