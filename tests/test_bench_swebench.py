"""``sweflow bench swebench``'s ``subset``: the report says which SWE-bench its rows are, so
Lite, Verified and full-set figures are never mixed up in a table."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.bench.swebench import DATASET, subset_of
from sweflow.cli.main import app


@pytest.mark.parametrize(
    ("dataset", "subset"),
    [
        (DATASET, "lite"),  # the committed sample: three Lite rows
        ("princeton-nlp/SWE-bench_Lite", "lite"),
        ("SWE-bench/SWE-bench_Verified", "verified"),
        ("rows/swe-bench-verified.jsonl", "verified"),
        ("lite.json", "lite"),
        ("princeton-nlp/SWE-bench", "full"),
        ("data/swebench_test.parquet", "full"),
        ("data/learn/tasks.jsonl", "custom"),
    ],
)
def test_the_subset_is_told_by_the_datasets_name(dataset, subset) -> None:
    assert subset_of(Path(dataset) if isinstance(dataset, str) else dataset) == subset


def test_an_unknown_subset_is_refused_before_any_work() -> None:
    result = CliRunner().invoke(app, ["bench", "swebench", "--subset", "lightweight"])
    assert result.exit_code == 2
    assert "--subset" in result.output and "lightweight" in result.output
