"""Task synthesis end to end on a real project (parse 1.20.2 and its real pytest suite), offline.

The source is a local git repository holding the parse sdist (the base commit of the demo task
set's bundle); its environment is built from the prefetched wheelhouse; every candidate runs the
real suite in a sandbox and the emitted tasks go through the same validation as
``sweflow env validate``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.harness.specs import load_specs
from sweflow.instances import load_instances
from sweflow.synth.config import SynthConfig
from sweflow.synth.sources import SourceError
from sweflow.synth.synthesize import Synthesizer, operator_summary

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
OPERATORS = ["remove_conditional", "negate_condition", "change_operator"]


def _config(source: Path, out: Path, **kw) -> SynthConfig:
    return SynthConfig(
        sources=[{"source": str(source), "repo": "pypi/parse", "version": "1.20.2"}],
        out=out,
        seed=5,
        operators=OPERATORS,
        max_tasks=2,
        **kw,
    )


@pytest.fixture(scope="module")
def first_run(parse_repo: Path, tmp_path_factory, wheelhouse: Path, bookworm_rootfs: Path):
    root = tmp_path_factory.mktemp("synth")
    config = _config(parse_repo, root / "out" / "tasks.jsonl")
    instances, reports = Synthesizer(config, root / "work", wheelhouse=wheelhouse).run()
    return root, config, instances, reports


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_synthesized_tasks_are_valid_swebench_rows(first_run, tmp_path: Path) -> None:
    root, config, instances, reports = first_run
    assert len(instances) == 2 and reports[0].rejected_by_final_check == []
    rows = load_instances(config.out).raise_for_errors()
    assert [r.instance_id for r in rows] == [i.instance_id for i in instances]
    specs = load_specs(config.out.parent / "specs.yaml")
    assert specs.get("pypi/parse", "1.20.2").test_cmd.startswith("pytest")
    clone = tmp_path / "clone.git"
    bundle = config.out.parent / "repos" / "pypi__parse.bundle"
    subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(clone)], check=True)
    for row in rows:
        assert row.FAIL_TO_PASS and row.PASS_TO_PASS and row.synth["operator"] in OPERATORS
        assert row.eval_script and row.log_parser == "parse_log_pytest"
        assert row.FAIL_TO_PASS[0] in row.problem_statement
        hidden = {t.split("::")[0] for t in row.FAIL_TO_PASS}
        at_base = set(_git(clone, "ls-tree", "-r", "--name-only", row.base_commit).split())
        at_clean = set(
            _git(clone, "ls-tree", "-r", "--name-only", row.environment_setup_commit).split()
        )
        assert hidden <= at_clean and not hidden & at_base  # the answer key is not at base
        assert f"+++ b/{row.synth['file']}" in row.patch
        assert all(
            "new file mode" in row.test_patch and f"+++ b/{f}" in row.test_patch for f in hidden
        )
        # the fix and the restored tests bring the base commit back to the clean release
        fixed = _git(clone, "diff", row.base_commit, row.environment_setup_commit)
        assert fixed == row.patch + row.test_patch or set(fixed.split("\n")) == set(
            (row.patch + row.test_patch).split("\n")
        )
    summary = operator_summary(reports)
    assert sum(r["valid"] for r in summary.values()) >= 2
    assert all(
        r["candidates"] >= r["compiled"] >= r["broke_tests"] >= r["valid"] for r in summary.values()
    )


def test_a_rerun_resumes_from_the_journal(first_run, wheelhouse: Path) -> None:
    root, config, instances, _ = first_run
    journal = next((root / "work" / "candidates").glob("*.jsonl"))
    before = journal.read_text()
    again, _ = Synthesizer(config, root / "work", wheelhouse=wheelhouse).run()
    assert journal.read_text() == before  # no candidate ran twice
    assert [i.model_dump() for i in again] == [i.model_dump() for i in instances]


@pytest.mark.slow
def test_regeneration_from_scratch_is_exact(
    first_run, parse_repo: Path, tmp_path: Path, wheelhouse
):
    _, config, _, _ = first_run
    other = _config(parse_repo, tmp_path / "out" / "tasks.jsonl")
    Synthesizer(other, tmp_path / "work", wheelhouse=wheelhouse).run()
    assert other.out.read_bytes() == config.out.read_bytes()
    assert (tmp_path / "out" / "specs.yaml").read_text() == (
        config.out.parent / "specs.yaml"
    ).read_text()


def test_cli_reports_a_bad_source_by_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["synth", "--source", "pypi:nope", "--out", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 2
    assert "pypi:nope" in result.output and "expected pypi:NAME==VERSION" in result.output
    not_git = tmp_path / "plain"
    not_git.mkdir()
    with pytest.raises(SourceError, match="not a git repository"):
        Synthesizer(_config(not_git, tmp_path / "t.jsonl"), tmp_path / "work").run()
    assert not (tmp_path / "t.jsonl").exists()  # nothing half-written
