"""Dataset formats: each published format loaded, detected, mapped to the task record and back,
bad rows refused with the right message, and each project's own grading logic (run from a
fetched mirror under /work/.mirror, outside the project) agreeing with sweflow's on real logs."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from swebench.task.checks import expected_image

from sweflow.envcache.dataset import Dataset
from sweflow.formats import FormatError, get_format, row_mapper, source_row
from sweflow.formats.patches import reverse_patch
from sweflow.formats.r2egym import (
    LINK_VENV,
    R2EGymGrading,
    gold_patch,
    parse_log,
    reward,
    run_output,
)
from sweflow.formats.swesmith import SweSmithGrading
from sweflow.instances import InstancesError, load_instances
from sweflow.instances.record import parse_row

pytestmark = pytest.mark.quick

DATA = Path(__file__).parents[1] / "data" / "formats"
MIRRORS = Path("/work/.mirror")
SMITH = DATA / "swe-smith"
SMITH_ROW = SMITH / "pandas-dev__pandas.95280573.pr_53652.json"
SMITH_RUN = SMITH / "run_evaluation" / "pandas-dev__pandas.95280573.pr_53652"
R2E_LOG = DATA / "r2e-gym" / "sympy_003029fe.log"
R2E_ROWS = DATA / "r2e-gym" / "aiohttp" / "tasks.jsonl"


def mirror_file(repo: str, path: str) -> str:
    """A file of a fetched mirror (skipped, with the reason printed, when it is absent)."""
    git = MIRRORS / repo.replace("/", "+") / "repo"
    if not git.is_dir():
        pytest.skip(f"no mirror of {repo} under {MIRRORS} (fetch github:{repo})")
    return subprocess.run(
        ["git", "-C", str(git), "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


def functions_of(source: str, names: set[str], namespace: dict) -> dict:
    """The named top-level functions of a module's source, run in ``namespace`` (the project's
    own code, read from its mirror, never copied into sweflow)."""
    tree = ast.parse(source)
    picked = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    exec(compile(ast.Module(picked, []), "<mirror>", "exec"), namespace)  # noqa: S102
    return namespace


def mapped(row: dict, fmt: str = "auto"):
    parsed = parse_row(dict(row), "test", 0, row_mapper(fmt))
    assert not isinstance(parsed, list), parsed
    return parsed


# -- SWE-bench --------------------------------------------------------------------------------
def test_swebench_lite_rows_load_as_swebench_with_their_official_images() -> None:
    rows = json.loads((DATA / "swebench" / "lite.json").read_text())
    data = Dataset.load(DATA / "swebench" / "lite.json")
    assert [r.instance_id for r in data.rows] == [r["instance_id"] for r in rows]
    for original, inst in zip(rows, data.rows, strict=True):
        assert inst.model_extra["dataset_format"] == "swebench"
        assert inst.image == expected_image(original["instance_id"])
        assert source_row(inst) == original  # the row comes back as published
        data.specs.get(inst.repo, inst.version)  # the built-in recipe is there
    assert data.rows[0].image == "swebench/sweb.eval.x86_64.django_1776_django-16255:latest"


def test_multimodal_and_multilingual_rows_are_refused_naming_what_is_missing() -> None:
    row = json.loads((DATA / "swebench" / "lite.json").read_text())[0]
    refused = parse_row(
        {**row, "image_assets": '{"problem_statement": ["x.png"]}'}, "t", 0, row_mapper()
    )
    assert "Multimodal" in refused[0].message and refused[0].field == "image_assets"
    go = {**row, "repo": "caddyserver/caddy", "instance_id": "caddyserver__caddy-1"}
    refused = parse_row(go, "t", 0, row_mapper("swebench"))
    assert "Multilingual row (caddyserver/caddy)" in refused[0].message
    assert "eval_script and log_parser" in refused[0].message


# -- SWE-smith --------------------------------------------------------------------------------
def test_swesmith_row_maps_to_its_fix_recipe_and_image_and_back() -> None:
    row = json.loads(SMITH_ROW.read_text())
    data = Dataset.load(SMITH_ROW)
    (inst,) = data.rows
    assert inst.model_extra["dataset_format"] == "swe-smith"
    assert inst.FAIL_TO_PASS[0].endswith("test_getitem_pyarrow_index[DataFrame]")
    assert inst.patch == reverse_patch(row["patch"]) and reverse_patch(inst.patch) == row["patch"]
    assert inst.image == "jyangballin/swesmith.x86_64.pandas-dev_1776_pandas.95280573"
    spec = data.specs.get(inst.repo, inst.version)  # SWE-smith's profile of the repository
    assert spec.python == "3.10" and spec.test_cmd.startswith("pytest --disable-warnings")
    assert source_row(inst) == row


def test_a_swesmith_row_without_its_branch_commit_is_built_as_swesmith_made_the_branch(
    tmp_path: Path,
) -> None:
    """Rows published since 2025-05 name no base_commit (the harness checks out the mirror's
    branch named after the instance): upstream at the profile's commit, the bug applied on it."""
    row = json.loads(SMITH_ROW.read_text())
    del row["base_commit"]
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    data = Dataset.load(tmp_path / "rows.jsonl")
    (inst,) = data.rows
    assert (inst.repo, inst.base_commit) == (
        "pandas-dev/pandas",
        "95280573e15be59036f98d82a8792599c10c6603",
    )
    assert inst.setup_patch == row["patch"] and inst.patch == reverse_patch(row["patch"])
    assert data.specs.get(inst.repo, inst.version).python == "3.10"
    assert "pytest --disable-warnings" in SweSmithGrading().eval_script(inst, None, "")
    assert source_row(inst) == row


def test_swesmith_fix_is_the_bug_undone(tmp_path: Path) -> None:
    """git itself: the bug applied, then the fix, gives the tree back."""
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "m.py").write_text("def f(x):\n    return x + 1\n\n\ndef g():\n    pass\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (repo / "m.py").write_text("def f(x):\n    return x - 1\n\n\ndef g():\n    pass")
    (repo / "new.py").write_text("NEW = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    bug = subprocess.run([*git, "diff", "--cached"], capture_output=True, text=True).stdout
    subprocess.run([*git, "commit", "-qm", "bug"], check=True)
    (tmp_path / "fix.diff").write_text(reverse_patch(bug))
    subprocess.run(["git", "-C", str(repo), "apply", str(tmp_path / "fix.diff")], check=True)
    assert (repo / "m.py").read_text().endswith("pass\n") and not (repo / "new.py").exists()


def smith_reference(instance: dict, log_path: Path) -> dict:
    """SWE-smith's own get_eval_report steps (swesmith/harness/grading.py, log_parsers.py at
    the mirror's commit): read_test_output, the repository's parser, get_eval_tests_report and
    get_resolution_status, with the test files of get_test_command for a pytest command."""
    import swebench.harness.constants as c
    from swebench.harness.grading import get_resolution_status

    parsers = functions_of(
        mirror_file("SWE-bench/SWE-smith", "swesmith/harness/log_parsers.py"),
        {"parse_log_pytest"},
        {"re": re, "TestStatus": c.TestStatus},
    )
    names = {"read_test_output", "get_eval_tests_report"}
    space = {n: getattr(c, n) for n in dir(c) if n.isupper()} | {
        "Path": Path,
        "TestStatus": c.TestStatus,
    }
    space |= {"TEST_OUTPUT_START": c.START_TEST_OUTPUT, "TEST_OUTPUT_END": c.END_TEST_OUTPUT}
    grading = functions_of(
        mirror_file("SWE-bench/SWE-smith", "swesmith/harness/grading.py"), names, space
    )
    output, found = grading["read_test_output"](str(log_path))
    if not found:
        return {"resolved": False}
    statuses = parsers["parse_log_pytest"](output)
    f2p = [*instance["FAIL_TO_PASS"]]
    files = sorted({t.split("::", 1)[0] for t in f2p})
    keep = [t for t in instance["PASS_TO_PASS"] if any(t.startswith(f) for f in files)]
    ref = {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": keep}
    report = grading["get_eval_tests_report"](statuses, ref)
    return {"resolved": get_resolution_status(report) == "RESOLVED_FULL", "tests_status": report}


@pytest.mark.parametrize("variant", ["as run", "f2p fails", "f2p missing", "no end marker"])
def test_swesmith_grading_agrees_with_swesmiths_own(tmp_path: Path, variant: str) -> None:
    inst = Dataset.load(SMITH_ROW).rows[0]
    log = (SMITH_RUN / "test_output.txt").read_text()
    first = inst.FAIL_TO_PASS[0]
    if variant == "f2p fails":
        log = log.replace(f"{first} PASSED", f"{first} FAILED")
    elif variant == "f2p missing":  # SWE-smith counts a test absent from the log as passing
        log = "\n".join(line for line in log.split("\n") if not line.startswith(first))
    elif variant == "no end marker":
        log = log.replace(">>>>> End Test Output", "")
    (tmp_path / "test_output.txt").write_text(log)
    ours = SweSmithGrading().report(inst, log)
    theirs = smith_reference(inst.model_dump(), tmp_path / "test_output.txt")
    assert ours["resolved"] == theirs["resolved"]
    assert ours.get("tests_status") == theirs.get("tests_status")
    if variant == "as run":  # and the report.json SWE-smith wrote for this very run
        published = json.loads((SMITH_RUN / "report.json").read_text())
        assert ours["tests_status"] == published["tests_status"] and ours["resolved"]
    assert ours["resolved"] == (variant in ("as run", "f2p missing"))


SMITH_ROWS = SMITH / "monkeytype" / "tasks.jsonl"


@pytest.mark.parametrize("kind", ["gold", "base"])
def test_swesmith_grading_agrees_with_swesmiths_own_on_sweflows_runs(kind: str) -> None:
    """The validation's runs of the MonkeyType rows on ``local`` (sweflow/data/formats/
    swe-smith/monkeytype/logs: the fix applied, and the bug left), graded by SWE-smith's own
    steps and by sweflow's: the same verdicts and test statuses, the fix resolving each."""
    for inst in Dataset.load(SMITH_ROWS).rows:
        log = SMITH / "monkeytype" / "logs" / inst.instance_id / f"{kind}.log"
        ours = SweSmithGrading().report(inst, log.read_text())
        theirs = smith_reference(inst.model_dump(), log)
        assert ours["resolved"] == theirs["resolved"] == (kind == "gold"), inst.instance_id
        assert ours["tests_status"] == theirs["tests_status"], inst.instance_id


# -- R2E-Gym ----------------------------------------------------------------------------------
def r2e_row(expected: dict[str, str]) -> dict:
    """A row with R2E-Gym's columns (none is published in a repository reachable here)."""
    hunk = {
        "descriptor": {
            "old_range": {"start": 1, "length": 1},
            "new_range": {"start": 1, "length": 1},
            "section": "",
        },
        "line_group": {
            "all_lines": [
                {"content": "x = 1", "type": "deleted"},
                {"content": "x = 2", "type": "added"},
            ]
        },
    }

    def diff(path: str) -> dict:
        return {
            "header": {"file": {"path": path}, "misc_line": None},
            "index_line": {"old_commit_hash": "aaa", "new_commit_hash": "bbb", "mode": "100644"},
            "minus_file": {"path": f"a/{path}"},
            "plus_file": {"path": f"b/{path}"},
            "hunks": [hunk],
        }

    summary = "short test summary info\nPASSED r2e_tests/test_1.py::test_a\n"
    return {
        "repo_name": "sympy",
        "docker_image": "namanjain12/sympy_final:003029fe443c6c234775a2517f0d40b9d62dc40b",
        "commit_hash": "003029fe443c6c234775a2517f0d40b9d62dc40b",
        "problem_statement": "[ISSUE]\nIdx is broken\n[/ISSUE]",
        "expected_output_json": json.dumps(expected),
        "execution_result_content": json.dumps(
            {
                "test_file_names": ["test_1.py"],
                "test_file_codes": ["def test_a():\n    assert True\n"],
                "new_commit_res_stdout": summary,
                "old_commit_res_stdout": summary.replace("PASSED", "FAILED"),
            }
        ),
        "parsed_commit_content": json.dumps(
            {
                "old_commit_hash": "1111111",
                "new_commit_hash": "003029fe",
                "file_diffs": [
                    diff("sympy/tensor/indexed.py"),
                    diff("sympy/tensor/tests/test_indexed.py"),
                ],
            }
        ),
    }


def test_r2egym_row_maps_to_a_task_with_its_hidden_tests_and_image() -> None:
    row = r2e_row({"test_a": "PASSED"})
    inst = mapped(row)
    assert inst.model_extra["dataset_format"] == "r2e-gym"
    assert (inst.instance_id, inst.repo, inst.base_commit) == (
        "sympy__003029fe443c6c234775a2517f0d40b9d62dc40b",
        "sympy/sympy",
        "1111111",
    )
    assert inst.image == row["docker_image"]
    assert "sympy/tensor/indexed.py" in inst.patch and "tests/" not in inst.patch  # no test files
    assert inst.FAIL_TO_PASS == ["r2e_tests/test_1.py::test_a"] and inst.PASS_TO_PASS == []
    script = R2EGymGrading().eval_script(inst, None, "")
    assert "cat > r2e_tests/test_1.py" in script and "-m pytest -rA r2e_tests" in script
    assert source_row(inst) == row


def test_r2egym_gold_patch_is_rendered_as_r2egym_renders_it() -> None:
    """R2E-Gym's own FileDiff.get_patch, run on the same parsed commit (skipped without its
    mirror), gives the same text."""
    source = mirror_file("R2E-Gym/R2E-Gym", "src/r2egym/commit_models/diff_classes.py")
    assert "def get_patch" in source
    commit = json.loads(r2e_row({})["parsed_commit_content"])
    text = gold_patch(commit)
    assert text.startswith("diff --git a/sympy/tensor/indexed.py b/sympy/tensor/indexed.py\n")
    assert (
        "index aaa..bbb 100644\n--- a/sympy/tensor/indexed.py\n+++ b/sympy/tensor/indexed.py\n"
        in text
    )
    assert "@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n" in text


def r2e_reference(output: str, expected_json: str, repo_name: str = "sympy") -> float:
    """R2E-Gym's own reward (DockerRuntime._calculate_reward_r2e and parse_log_pytest,
    decolor_dict_keys from execution_log_parser.py), run from its mirror."""
    parser = functions_of(
        mirror_file("R2E-Gym/R2E-Gym", "src/r2egym/repo_analysis/execution_log_parser.py"),
        {"parse_log_pytest", "decolor_dict_keys", "parse_log_fn"},
        {"re": re},
    )
    tree = ast.parse(mirror_file("R2E-Gym/R2E-Gym", "src/r2egym/agenthub/runtime/docker.py"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DockerRuntime")
    methods = [
        f
        for f in cls.body
        if isinstance(f, ast.FunctionDef) and f.name in ("run_tests", "_calculate_reward_r2e")
    ]
    space = {"json": json, "re": re, **parser}
    exec(compile(ast.Module(methods, []), "<mirror>", "exec"), space)  # noqa: S102
    runtime = SimpleNamespace(ds={"expected_output_json": expected_json})
    runtime.run = lambda *args, **kw: (output, 0)
    runtime.run_tests = lambda: space["run_tests"](runtime)
    runtime.parse_logs = lambda out: parser["parse_log_fn"](repo_name)(out)
    runtime.alt_path = "/root"
    try:
        return space["_calculate_reward_r2e"](runtime)
    except KeyError:  # R2E-Gym raises on a parsed test it does not expect: no reward
        return 0.0


@pytest.mark.parametrize("variant", ["gold", "one flipped", "one missing", "unexpected", "colored"])
def test_r2egym_reward_agrees_with_r2egyms_own(variant: str) -> None:
    log = R2E_LOG.read_text()
    expected = parse_log(log)
    if variant == "one flipped":
        expected["test_Idx_subs"] = "FAILED"
    elif variant == "one missing":
        expected.pop("test_Idx_subs")
    elif variant == "unexpected":
        expected = {("x" + k if k == "test_Idx_subs" else k): v for k, v in expected.items()}
    elif variant == "colored":
        log = log.replace("PASSED r2e_tests", "\x1b[32mPASSED\x1b[0m r2e_tests")
        expected = {f"\x1b[1m{k}\x1b[0m": v for k, v in expected.items()}
    ours, _ = reward(log, json.dumps(expected))
    assert ours == r2e_reference(log, json.dumps(expected))
    assert ours == (1.0 if variant in ("gold", "colored") else 0.0)


def test_r2egym_published_rows_and_their_runs_are_graded_as_r2egym_grades_them() -> None:
    """Five published R2E-Gym-Subset rows (aiohttp): each maps to the parent of its commit in
    aio-libs/aiohttp and R2E-Gym's recipe, and the runs of its hidden tests R2E-Gym made after
    and before the commit get sweflow's verdicts as R2E-Gym's own reward gives them: the run
    after resolved, the one before not (10 real logs; R2E-Gym's code from its mirror)."""
    from sweflow.bench.datasets import _own_runs_agree
    from sweflow.formats import recipes_for
    from sweflow.formats.r2egym import published_runs

    rows = load_instances(R2E_ROWS, mapper=row_mapper()).raise_for_errors()
    assert len(rows) == 5 and {r.repo for r in rows} == {"aio-libs/aiohttp"}
    assert all(r.base_commit == r.model_extra["commit_hash"] + "^" for r in rows)
    spec = recipes_for(rows).get("aio-libs/aiohttp", "r2e-gym")
    assert spec.python == "3.9" and spec.install.endswith(f"&& {LINK_VENV}")
    assert all(_own_runs_agree(row) for row in rows)
    for row in rows:
        expected = row.model_extra["expected_output_json"]
        after, before = (run_output(log) or "" for log in published_runs(row))
        assert reward(after, expected)[0] == 1.0 and reward(before, expected)[0] == 0.0
        theirs = [r2e_reference(out, expected, "aiohttp") for out in (after, before)]
        assert theirs == [1.0, 0.0], row.instance_id


# -- SWE-Gym, SWE-rebench (rows built with their schemas: none is committed where reachable) ---
def test_swegym_rows_are_told_by_repository_and_get_the_forks_recipe() -> None:
    row = json.loads((DATA / "swebench" / "lite.json").read_text())[0]
    row = {**row, "instance_id": "getmoto__moto-7365", "repo": "getmoto/moto", "version": "5.0"}
    inst = mapped(row)
    assert inst.model_extra["dataset_format"] == "swe-gym"
    assert inst.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365:latest"
    spec = get_format("swe-gym").recipes([inst]).get("getmoto/moto", "5.0")
    assert (spec.python, spec.install, spec.test_cmd) == ("3.12", "make init", "pytest -n0 -rA")


def test_swerebench_install_config_becomes_the_rows_recipe() -> None:
    row = json.loads((DATA / "swebench" / "lite.json").read_text())[2]
    config = {
        "python": "3.9",
        "install": "pip install -e .",
        "test_cmd": "pytest -rA",
        "pre_install": ["apt-get install -y gcc", "sed -i 's/x/y/' setup.cfg"],
        "pip_packages": ["pytest==7.4.0"],
        "reqs_path": ["requirements.txt"],
        "log_parser": "parse_log_pytest",
    }
    inst = mapped({**row, "install_config": config})
    assert inst.model_extra["dataset_format"] == "swe-rebench"
    assert (
        inst.version.startswith(f"{row['version']}+")
        and source_row(inst)["version"] == row["version"]
    )
    assert inst.image == expected_image(row["instance_id"], "swerebench")
    spec = get_format("swe-rebench").recipes([inst]).get(inst.repo, inst.version)
    assert spec.pre_install == ["apt-get install -y gcc"] and spec.setup_repo == [
        "sed -i 's/x/y/' setup.cfg"
    ]
    assert spec.requirements_paths == ["requirements.txt"] and spec.log_parser == "parse_log_pytest"
    refused = parse_row(
        {**row, "install_config": {**config, "log_parser": "parse_nope"}}, "t", 0, row_mapper()
    )
    assert "log_parser 'parse_nope' is not a swebench parser" in refused[0].message


# -- detection and the registry ---------------------------------------------------------------
def test_a_row_of_no_known_format_names_its_columns_and_every_formats_needs(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"task": "x", "answer": 1}) + "\n")
    with pytest.raises(InstancesError) as err:
        Dataset.load(path)
    message = str(err.value)
    assert "it has columns answer, task" in message
    assert "r2e-gym: repo_name, docker_image" in message and "sweflow: instance_id, repo" in message


def test_a_named_format_refuses_rows_of_another() -> None:
    row = json.loads(SMITH_ROW.read_text())
    refused = parse_row(row, "t", 0, row_mapper("r2e-gym"))
    assert "named format r2e-gym, but a row without repo_name" in refused[0].message


def test_formats_are_named_like_every_registry() -> None:
    assert get_format("sweflow.formats.swesmith:FORMAT") is get_format("swe-smith")
    with pytest.raises(FormatError, match="unknown dataset format 'nope'"):
        row_mapper("nope")
    rows = load_instances(SMITH_ROW, mapper=row_mapper("swe-smith")).instances
    assert rows[0].model_extra["dataset_format"] == "swe-smith"
