"""``sweflow bench swebench``'s report: the ``subset`` says which SWE-bench its rows are, so
Lite, Verified and full-set figures are never mixed up in a table, and each failure's cause is
the one of the tests that singled the row out."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.bench.swebench import (
    DATASET,
    RowResults,
    build_and_validate,
    failure_cause,
    subset_of,
)
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


# From pydata__xarray-4695's gold run (SWE-bench Verified): its PASS_TO_PASS cdms2 tests were
# skipped (cdms2 is conda-only); a test outside its lists failed for a reason of its own
XARRAY_4695_LOG = """\
__________________ TestDataArray.test_from_series_multiindex ___________________
E                   ImportError: Pandas requires version '0.19.0' or newer of 'xarray' (version \
'0.1.dev1+g51ef2a6.d20261128' currently installed).
PASSED xarray/tests/test_dataarray.py::test_deepcopy_obj_array
SKIPPED [1] xarray/tests/test_dataarray.py:2681: needs to be fixed for shortcut=False, \
keep_attrs=False
SKIPPED [1] xarray/tests/test_dataarray.py:3783: could not import 'cdms2': No module named 'cdms2'
SKIPPED [1] xarray/tests/test_dataarray.py:3825: could not import 'cdms2': No module named 'cdms2'
FAILED xarray/tests/test_dataarray.py::TestDataArray::test_from_series_multiindex
"""
CDMS2_TESTS = [
    f"xarray/tests/test_dataarray.py::TestDataArray::test_to_and_from_cdms2_{kind}"
    for kind in ("classic", "ugrid")
]


def test_a_failure_by_skipping_is_named_by_the_skip_reason_not_by_another_tests_error(tmp_path):
    """The row's failing tests have no failure section: they were skipped, and the harness
    counts a skipped PASS_TO_PASS test as failed. The cause was the error of a test outside the
    row's lists (pandas' version check), which said nothing of why the row failed."""
    log = tmp_path / "gold-1.log"
    log.write_text(XARRAY_4695_LOG)
    assert failure_cause(log, CDMS2_TESTS) == (
        "skipped, not passed: could not import 'cdms2': No module named 'cdms2'"
    )
    failing = ["xarray/tests/test_dataarray.py::TestDataArray::test_from_series_multiindex"]
    assert failure_cause(log, failing).startswith("ImportError: Pandas requires version")


def test_a_rerun_keeps_a_rows_record_only_while_its_environment_is_the_same(
    grading_built, tmp_path: Path
) -> None:
    """A record stands for the layers it was made on: one made on other layers (a base rebuilt
    with other packages, an edited spec) is built and validated again; a current one is kept."""
    data, store = grading_built
    row = data.rows[0]
    results = RowResults(tmp_path / "results")
    results.put(row.instance_id, {"layers": ["0" * 64], "outcome": "gold_fails", "build": "built"})
    said: list[str] = []
    build_and_validate(data, [row], store, results, 1, 900.0, said.append)
    assert said[0].endswith("1 to build and validate"), said
    record = results.get(row.instance_id)
    assert record["outcome"] == "valid", record
    assert record["layers"] == data.builder(store).stored_layers(row)
    said.clear()
    build_and_validate(data, [row], store, results, 1, 900.0, said.append)
    assert said == ["1 rows, 1 mirrored, 0 to build and validate"]
