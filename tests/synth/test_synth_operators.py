"""Bug operators and the seeded candidate order (pure Python: no sandbox)."""

from __future__ import annotations

import ast
import json
import tarfile
from pathlib import Path

import libcst as cst
import pytest
from pydantic import ValidationError

from sweflow.synth.candidates import Baseline, Candidate, enumerate_candidates, judge, source_files
from sweflow.synth.config import SynthConfig, SynthConfigError, load_config
from sweflow.synth.operators import OPERATORS, apply_site, find_sites
from sweflow.synth.sources import SourceError, parse_source, unpack_sdist
from sweflow.synth.testrun import SuiteRun

SAMPLE = '''\
LIMIT = 10  # module level: never mutated


def window(items, size=2):
    """Docstring."""
    out = []
    if size <= 0:
        raise ValueError("size")
    for i in range(len(items) - size + 1):
        out.append(tuple(items[i:i + size]))
    while len(out) > LIMIT and not items:
        out.pop()
    try:
        name = str(items).strip().lower()
    except TypeError:
        name = None
    if name is None:
        return out
    else:
        return list(out) if out else [name] + list(x for x in out)


class Box:
    size = 3  # class level: never mutated

    def grow(self, n):
        self.size += n * 2
        return self.size == 5 or self.size in (1, 2)
'''


def test_every_operator_finds_sites_and_each_mutation_compiles_and_differs() -> None:
    module = cst.parse_module(SAMPLE)
    for name, operator in OPERATORS.items():
        lines = find_sites(module, operator)
        assert lines, f"{name} found no site in the sample"
        for index, line in enumerate(lines):
            code = apply_site(module, operator, index)
            assert code != SAMPLE, f"{name} site {index} (line {line}) changed nothing"
            ast.parse(code)  # still valid Python
            assert code.splitlines()[0] == "LIMIT = 10  # module level: never mutated"
            assert "    size = 3  # class level: never mutated" in code
            assert apply_site(module, operator, index) == code  # deterministic


def test_operators_make_the_expected_changes() -> None:
    module = cst.parse_module(SAMPLE)

    def first(name: str) -> str:
        return apply_site(module, OPERATORS[name], 0)

    assert "if not (size <= 0):" in first("negate_condition")
    assert "if size < 0:" in first("change_operator")
    assert "return out\n    else:" not in first("invert_if_else")
    assert "out = []" not in first("remove_assignment")
    assert "raise ValueError" not in first("remove_conditional")
    assert "for i in range" not in first("remove_loop")
    assert "try:" not in first("remove_try") and "name = str(items).strip().lower()" in first(
        "remove_try"
    )
    assert "name = str(items).lower()\n" in first("break_call_chain")  # innermost chain first
    shuffled = first("shuffle_statements").split('"""Docstring."""\n')[1].splitlines()
    assert shuffled[:3] == ["    if size <= 0:", '        raise ValueError("size")', "    out = []"]
    assert len(OPERATORS) >= 8


def test_candidate_order_is_seeded_and_interleaves_operators(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(SAMPLE)
    (tmp_path / "pkg" / "b.py").write_text(SAMPLE.replace("window", "other"))
    files = ["pkg/a.py", "pkg/b.py"]
    ops = ["change_operator", "remove_loop", "negate_condition"]
    first = enumerate_candidates(tmp_path, files, ops, seed=1, label="acme/pkg")
    assert first == enumerate_candidates(tmp_path, files, ops, seed=1, label="acme/pkg")
    assert first != enumerate_candidates(tmp_path, files, ops, seed=2, label="acme/pkg")
    assert [c.operator for c in first[:3]] == ops  # every operator gets a turn early
    per_file_sites = sum(len(find_sites(cst.parse_module(SAMPLE), OPERATORS[o])) for o in ops)
    assert len(first) == 2 * per_file_sites and len(set(first)) == len(first)


def test_source_files_leave_out_tests_docs_and_packaging() -> None:
    paths = [
        "setup.py",
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/tests/test_core.py",
        "tests/helper.py",
        "docs/conf.py",
        "conftest.py",
        "pkg/core_test.py",
        "README.rst",
        "versioneer.py",
    ]
    assert source_files(paths) == ["pkg/__init__.py", "pkg/core.py"]


def _result_of(run: SuiteRun, passing: set[str], fraction: float = 1.0):
    candidate = Candidate("pkg/a.py", "remove_loop", 0, 3)
    return judge(candidate, run, Baseline(passing, 1.0), "digest", fraction)


def test_judge_needs_a_broken_test_and_a_survivor_in_its_file() -> None:
    clean = {"t/test_a.py::test_1", "t/test_a.py::test_2", "t/test_b.py::test_3"}
    broke_one = SuiteRun(
        {
            "t/test_a.py::test_1": "FAILED",
            "t/test_a.py::test_2": "PASSED",
            "t/test_b.py::test_3": "PASSED",
        }
    )
    result = _result_of(broke_one, clean)
    assert result.outcome == "valid"
    assert result.fail_to_pass == ["t/test_a.py::test_1"]
    assert result.pass_to_pass == ["t/test_a.py::test_2"]  # test_b.py is not in the task
    all_pass = SuiteRun(dict.fromkeys(clean, "PASSED"))
    assert _result_of(all_pass, clean).outcome == "tests_pass"
    alone = SuiteRun({"t/test_a.py::test_2": "PASSED", "t/test_b.py::test_3": "PASSED"})
    assert _result_of(alone, {"t/test_b.py::test_3", "t/test_c.py::x"}).outcome == "no_p2p"
    assert _result_of(broke_one, clean, fraction=0.2).outcome == "too_broad"
    # a test the run does not report (a collection error) counts as failing, as in the harness
    assert _result_of(SuiteRun({"t/test_a.py::test_2": "PASSED"}), clean).fail_to_pass == [
        "t/test_a.py::test_1",
        "t/test_b.py::test_3",
    ]
    assert _result_of(SuiteRun(timed_out=True), clean).outcome == "timeout"


def test_source_forms_and_errors(tmp_path: Path) -> None:
    source = parse_source("pypi:Foo_Bar==1.2.3")
    assert (source.repo, source.version, source.pypi) == (
        "pypi/foo-bar",
        "1.2.3",
        ("Foo_Bar", "1.2.3"),
    )
    assert source.slug == "pypi__foo-bar"
    assert parse_source(str(tmp_path), repo="me/proj").repo == "me/proj"
    for bad in ("pypi:foo", "pypi:foo>=1", str(tmp_path / "missing")):
        with pytest.raises(SourceError, match="expected pypi:NAME==VERSION"):
            parse_source(bad)


def test_sdist_unpacks_without_generated_egg_info(tmp_path: Path) -> None:
    top = tmp_path / "src" / "proj-1.0"
    (top / "proj.egg-info").mkdir(parents=True)
    (top / "proj.egg-info" / "SOURCES.txt").write_text("x\n")
    (top / "proj.py").write_text("X = 1\n")
    sdist = tmp_path / "proj-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(top, arcname="proj-1.0")
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack_sdist(sdist, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["proj.py"]


def test_recipe_errors_name_the_file_and_field(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("out: x.jsonl\nsources: [{source: 'pypi:a==1'}]\noperators: [nope]\n")
    with pytest.raises(SynthConfigError, match=r"r\.yaml: operators: .*unknown operator"):
        load_config(recipe)
    recipe.write_text("out: d/x.jsonl\nsources: [{source: 'pypi:a==1', colour: red}]\n")
    with pytest.raises(SynthConfigError, match=r"sources\.0\.colour"):
        load_config(recipe)
    recipe.write_text("out: d/x.jsonl\nsources: [{source: 'pypi:a==1'}]\n")
    config = load_config(recipe, seed=7)
    assert isinstance(config, SynthConfig) and config.out == (tmp_path / "d" / "x.jsonl").resolve()
    assert config.seed == 7


def test_a_recipe_split_is_checked_and_written_beside_the_dataset(tmp_path: Path) -> None:
    from sweflow.pipeline.sections import SplitSection
    from sweflow.synth.synthesize import Synthesizer

    sources = [{"source": "pypi:a==1"}, {"source": "pypi:B_c==2"}]
    base = {"out": str(tmp_path / "d" / "tasks.jsonl"), "sources": sources}
    with pytest.raises(ValidationError, match=r"no source gives: \['pypi/toolz'\]"):
        SynthConfig(**base, split={"eval": ["pypi/toolz"]})
    with pytest.raises(ValidationError, match="every source"):
        SynthConfig(**base, split={"eval": ["pypi/a", "pypi/b-c"]})
    config = SynthConfig(**base, split={"eval": ["pypi/b-c"]})
    Synthesizer(config, tmp_path / "work")._write_dataset([], {}, [])
    written = json.loads((tmp_path / "d" / "split.json").read_text())
    assert written == {"by": "repo", "eval": ["pypi/b-c"]}
    assert SplitSection(**written).eval == ["pypi/b-c"]  # the pipeline's split reads it as it is
    plain = SynthConfig(**{**base, "out": str(tmp_path / "e" / "tasks.jsonl")})
    Synthesizer(plain, tmp_path / "w2")._write_dataset([], {}, [])
    assert not (tmp_path / "e" / "split.json").exists()
