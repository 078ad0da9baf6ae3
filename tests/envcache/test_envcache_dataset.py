"""A dataset's specs and repositories, found by one rule for every caller (envcache/dataset.py):
specs.yaml and repos/ inside a dataset folder or beside a dataset file, bundles beside a file,
what is given explicitly first, the built-in SWE-bench table when no specs lie beside the rows.
The CLI, the pipeline and the benchmarks must agree on each dataset, read once as a ``Dataset``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweflow.cli.datasets import DatasetArgs
from sweflow.envcache.builder import EnvBuilder
from sweflow.envcache.dataset import Dataset, dataset_mirror, dataset_specs
from sweflow.envcache.repos import RepoSource
from sweflow.harness.specs import BUILTIN_SPECS, SpecError
from sweflow.instances import InstancesError
from sweflow.pipeline.config import PipelineConfig
from sweflow.pipeline.stages.common import make_builder

ROW = (
    '{"instance_id": "o__n-1", "repo": "o/n", "version": "1", "base_commit": "abc1234",'
    ' "problem_statement": "p", "FAIL_TO_PASS": [], "PASS_TO_PASS": []}\n'
)
SPECS = "o/n:\n  '1': {python: '3.11'}\n"


def dataset(folder: Path, *, specs: bool = True, repos: bool = True) -> Path:
    """``folder/tasks.jsonl`` with, beside it, specs.yaml and repos/ (or a bundle) as asked."""
    folder.mkdir(parents=True)
    (folder / "tasks.jsonl").write_text(ROW)
    if specs:
        (folder / "specs.yaml").write_text(SPECS)
    if repos:
        (folder / "repos").mkdir()
    else:
        (folder / "o__n.bundle").write_bytes(b"a git bundle")
    return folder / "tasks.jsonl"


def dataset_builder(rows: Path, store: Path, **given: object) -> EnvBuilder:
    return Dataset.load(rows, **given).builder(store)  # type: ignore[arg-type]


def test_a_dataset_folder_brings_its_specs_and_repos(tmp_path: Path) -> None:
    folder = dataset(tmp_path / "data").parent
    builder = dataset_builder(folder, tmp_path / "store")
    assert builder.options.repo_mirror == folder / "repos"
    assert set(builder.specs.specs) == {"o/n"}
    assert dataset_specs(folder) == folder / "specs.yaml"


def test_a_file_finds_specs_and_repos_beside_it(tmp_path: Path) -> None:
    rows = dataset(tmp_path / "data")
    builder = dataset_builder(rows, tmp_path / "store")
    assert builder.options.repo_mirror == rows.parent / "repos"
    assert set(builder.specs.specs) == {"o/n"}


def test_bundles_beside_a_file_are_its_mirror_when_there_is_no_repos_folder(
    tmp_path: Path,
) -> None:
    rows = dataset(tmp_path / "data", repos=False)
    mirror = dataset_builder(rows, tmp_path / "store").options.repo_mirror
    assert mirror == rows.parent
    assert RepoSource(mirror=mirror).locate("o/n") == rows.parent / "o__n.bundle"


def test_given_specs_and_mirror_win_over_what_lies_beside(tmp_path: Path) -> None:
    rows = dataset(tmp_path / "data")
    other = tmp_path / "other-specs.yaml"
    other.write_text("x/y:\n  '2': {python: '3.11'}\n")
    builder = dataset_builder(rows, tmp_path / "store", specs=other, mirror=tmp_path / "mirrors")
    assert set(builder.specs.specs) == {"x/y"}
    assert builder.options.repo_mirror == tmp_path / "mirrors"


def test_a_local_repo_or_url_replaces_the_default_mirror(tmp_path: Path) -> None:
    rows = dataset(tmp_path / "data")
    url = "https://example.org/{repo}.git"
    by_url = dataset_builder(rows, tmp_path / "store", repo_url=url)
    assert by_url.options.repo_mirror is None and by_url.options.repo_url == url
    by_path = dataset_builder(rows, tmp_path / "store", repo=tmp_path)
    assert by_path.options.repo_mirror is None and by_path.options.repo_path == tmp_path


def test_no_specs_beside_the_rows_means_the_builtin_table(tmp_path: Path) -> None:
    rows = dataset(tmp_path / "data", specs=False)
    assert dataset_specs(rows) == Path(BUILTIN_SPECS)
    assert "django/django" in dataset_builder(rows, tmp_path / "store").specs.specs


def test_a_dataset_that_is_no_path_has_no_mirror_and_the_builtin_specs() -> None:
    name = "princeton-nlp/SWE-bench_Lite-not-a-folder-here"
    assert dataset_mirror(name) is None
    assert dataset_specs(name) == Path(BUILTIN_SPECS)


@pytest.mark.parametrize("repos", [True, False], ids=["repos-folder", "bundles-beside"])
def test_the_cli_the_pipeline_and_the_benchmarks_find_the_same(tmp_path: Path, repos: bool) -> None:
    rows = dataset(tmp_path / "data", repos=repos)
    store = tmp_path / "store"
    cli = DatasetArgs(
        dataset=str(rows),
        split=None,
        specs=None,
        repo_mirror=None,
        repo=None,
        repo_url=None,
        instances=None,
        store=store,
        base=None,
        images=None,
        wheelhouse=None,
        max_workers=1,
    )
    config = PipelineConfig(run_dir=tmp_path / "run", dataset={"path": rows}, envs={"store": store})
    builders = [
        cli.build_work(cli.read()),
        make_builder(config, config.dataset.load()),
        Dataset.load(rows).builder(store),  # as the benchmarks make theirs
    ]
    mirror = rows.parent / "repos" if repos else rows.parent
    assert [b.options.repo_mirror for b in builders] == [mirror] * 3
    assert all(set(b.specs.specs) == {"o/n"} for b in builders)
    assert cli.read().specs_file == config.dataset.specs_path() == rows.parent / "specs.yaml"


def test_a_dataset_reads_its_specs_before_its_rows_and_narrows_them(tmp_path: Path) -> None:
    rows = dataset(tmp_path / "data")
    other = ROW.replace("o__n-1", "o__n-2")
    rows.write_text(ROW + other + "{}\n")
    (rows.parent / "specs.yaml").write_text("o/n: [unclosed\n")
    with pytest.raises(SpecError, match="specs.yaml is not valid YAML"):
        Dataset.load(rows)  # the bad specs are told, not the bad row
    (rows.parent / "specs.yaml").write_text(SPECS)
    with pytest.raises(
        InstancesError, match="row 2: a row of no known format; it has columns none"
    ):
        Dataset.load(rows)
    lenient = Dataset.load(rows, strict=False)
    assert [r.instance_id for r in lenient.rows] == ["o__n-1", "o__n-2"]
    assert {e.index for e in lenient.skipped} == {2}
    assert [r.instance_id for r in Dataset.load(rows, strict=False, limit=1).rows] == ["o__n-1"]
    only = Dataset.load(rows, strict=False, instances=["o__n-2"])
    assert [r.instance_id for r in only.rows] == ["o__n-2"]
