"""bench datasets: its committed rows, its options checked before any work, and the agreement
it counts with a project's published graded run (the whole run is the slow quick-run test of
tests/bench/test_benchmarks.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.bench import BenchError
from sweflow.bench.datasets import (
    FIXTURES,
    FORMATS_DATA,
    _own_runs_agree,
    _published_agreement,
    parse_datasets,
)
from sweflow.cli.main import app
from sweflow.envcache.dataset import Dataset
from sweflow.formats import FORMATS, format_of

pytestmark = pytest.mark.quick
REPO = Path(__file__).resolve().parents[2]
SMITH = FIXTURES["swe-smith"]


def test_every_format_has_its_rows_or_says_why_none() -> None:
    assert set(FIXTURES) == set(FORMATS)
    for name, fixture in FIXTURES.items():
        if fixture.rows is None:
            assert "Hugging Face" in fixture.source, name
            continue
        data = Dataset.load(fixture.rows, mirror=fixture.mirror, format=name)
        assert data.rows and {format_of(r).name for r in data.rows} == {name}


def test_the_swerebench_rows_are_what_their_script_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("rows", REPO / "scripts/make_swerebench_rows.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(tmp_path / "rows.jsonl")
    committed = FORMATS_DATA / "swe-rebench" / "rows.jsonl"
    assert (tmp_path / "rows.jsonl").read_bytes() == committed.read_bytes()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("swe-gym", "expected FORMAT=SOURCE"),
        ("swe-gym=", "expected FORMAT=SOURCE"),
        ("nope=rows.jsonl", "nope"),
        ("pkg.mod:FORMAT=rows.jsonl", "name a format"),
    ],
)
def test_a_bad_dataset_option_is_named(value: str, says: str) -> None:
    with pytest.raises(BenchError, match="--dataset") as caught:
        parse_datasets([value])
    assert says in str(caught.value)


def test_the_command_refuses_a_bad_dataset_before_any_work() -> None:
    done = CliRunner().invoke(app, ["bench", "datasets", "--json", "-d", "nope=x"])
    assert done.exit_code == 2 and "nope" in done.output
    assert parse_datasets(["swe-gym=SWE-Gym/SWE-Gym-Lite:train"]) == {
        "swe-gym": "SWE-Gym/SWE-Gym-Lite:train"
    }


def test_agreement_with_a_published_run_is_counted_and_a_changed_verdict_is_not(
    tmp_path: Path,
) -> None:
    assert SMITH.published is not None and SMITH.published_rows is not None
    rows = Dataset.load(SMITH.published_rows, format="swe-smith").rows
    assert _published_agreement(rows, SMITH.published) == [True]
    changed = tmp_path / "runs"
    shutil.copytree(SMITH.published, changed)
    report = changed / rows[0].instance_id / "report.json"
    published = json.loads(report.read_text())
    report.write_text(json.dumps({**published, "resolved": not published["resolved"]}))
    assert _published_agreement(rows, changed) == [False]


def test_the_command_refuses_a_bad_format_or_images_folder_before_any_work(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["bench", "datasets", "--json", "-f", "nope"])
    assert done.exit_code == 2 and "'nope': one of swebench" in done.output
    missing = tmp_path / "no-images"
    done = CliRunner().invoke(app, ["bench", "datasets", "--json", "--images", str(missing)])
    assert done.exit_code == 2 and "neither a folder of image archives" in done.output


def test_an_r2egym_rows_own_runs_agree_and_swapped_they_do_not() -> None:
    """R2E-Gym's rows carry the runs R2E-Gym made after and before the commit: the one after
    must grade resolved and the one before not; a row whose runs are swapped does not count."""
    rows = Dataset.load(FIXTURES["r2e-gym"].rows, format="r2e-gym").rows
    assert all(_own_runs_agree(row) for row in rows)
    result = json.loads(rows[0].model_extra["execution_result_content"])
    after, before = result["new_commit_res_stdout"], result["old_commit_res_stdout"]
    swapped = {**result, "new_commit_res_stdout": before, "old_commit_res_stdout": after}
    row = rows[0].model_copy(update={"execution_result_content": json.dumps(swapped)}, deep=True)
    assert not _own_runs_agree(row)
