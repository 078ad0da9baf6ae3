"""R2E-Gym (R2E-Gym/R2E-Gym-Lite, -Subset, -V1): commits of 13 repositories with hidden tests.

A row names its repository by a short name (``repo_name``), its image (``docker_image``,
``namanjain12/<repo>_final:<commit>``: the repository at the commit's parent in /testbed, its
venv in /testbed/.venv) and the commit (``commit_hash``, ``parsed_commit_content``); its tests
are hidden: the test files are in ``execution_result_content`` (``test_file_names``,
``test_file_codes``), and the expected result of every test in ``expected_output_json``.
Nothing else says how to grade; R2E-Gym's runtime (src/r2egym/agenthub/runtime/docker.py) does:
the hidden tests in /testbed/r2e_tests, ``bash run_tests.sh`` (``.venv/bin/python -W ignore -m
pytest -rA r2e_tests`` for most repositories; src/r2egym/repo_analysis/repo_analysis_args.py and
repo_testextract.py), ANSI codes stripped, the ``short test summary info`` read by its
``parse_log_pytest`` (execution_log_parser.py), and a reward of 1 only when every test's status
equals the expected one (``_calculate_reward_r2e``). This module does the same, in its own code.

The task record gets an ``instance_id`` (``<repo_name>__<commit_hash>``), the GitHub ``repo``,
``base_commit`` (the commit's parent), the gold ``patch`` (the commit's non-test Python files, as
R2E-Gym's ``ParsedCommit.get_patch(test_file=False)``), and FAIL_TO_PASS / PASS_TO_PASS as
pytest node ids: tests that pass after the commit and not before it, and tests that pass both
times, read from the row's own runs (``new_commit_res_stdout``, ``old_commit_res_stdout``). They
serve validation and the tamper guard; the reward is R2E-Gym's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import yaml
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

from sweflow.formats.base import DatasetFormat, FormatGrading, json_value
from sweflow.harness.apply import REPO_DIR
from sweflow.harness.specs import EnvSpec, SpecTable
from sweflow.instances import Instance
from sweflow.instances.record import RowRefused

# R2E-Gym's short names -> the GitHub repositories they are clones of.
REPOS = {
    "aiohttp": "aio-libs/aiohttp",
    "bokeh": "bokeh/bokeh",
    "coveragepy": "nedbat/coveragepy",
    "datalad": "datalad/datalad",
    "mypy": "python/mypy",
    "numpy": "numpy/numpy",
    "orange3": "biolab/orange3",
    "pandas": "pandas-dev/pandas",
    "pillow": "python-pillow/Pillow",
    "pyramid": "Pylons/pyramid",
    "scrapy": "scrapy/scrapy",
    "statsmodels": "statsmodels/statsmodels",
    "sympy": "sympy/sympy",
    "tornado": "tornadoweb/tornado",
}
RECIPE_VERSION = "r2e-gym"  # R2E-Gym installs a repository one way at every commit
LINK_VENV = 'ln -sfn "$(python -c "import sys; print(sys.prefix)")" .venv'
_PYTEST = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' .venv/bin/python -W ignore -m pytest -rA r2e_tests"  # noqa: E501
_RUNNERS = {  # a runner file among the hidden tests replaces pytest (repo_testextract.py)
    "unittest_custom_runner.py": ".venv/bin/python -W ignore r2e_tests/unittest_custom_runner.py",
    "tornado_unittest_runner.py": ".venv/bin/python -W ignore r2e_tests/tornado_unittest_runner.py",
}
# the eval script's markers around run_tests.sh's output, as bash -x prints them in its log
_RUN_START, _RUN_END = f"+ : '{START_TEST_OUTPUT}'", f"+ : '{END_TEST_OUTPUT}'"
_ANSI_LOG = re.compile(r"\x1b\[[0-9;]*m|\r")  # run_tests: what is stripped from the output
_ANSI_KEY = re.compile(r"\x1b\[\d+m")  # decolor_dict_keys: what is stripped from test names


def tests_command(repo_name: str, test_files: list[str]) -> str:
    """run_tests.sh of a row: R2E-Gym's test command for the repository."""
    for runner, command in _RUNNERS.items():
        if runner in test_files:
            return command
    if repo_name == "orange3":
        env, run = _PYTEST.split(" .venv", 1)
        return f"QT_QPA_PLATFORM=minimal {env} xvfb-run --auto-servernum .venv{run}"
    return _PYTEST


def hidden_tests(instance: Instance | Mapping[str, Any]) -> dict[str, str]:
    """The row's hidden test files, name -> code (``execution_result_content``)."""
    row = (instance.model_extra or {}) if isinstance(instance, Instance) else instance
    result = json_value(row.get("execution_result_content"), "execution_result_content")
    if not isinstance(result, dict):
        raise RowRefused("holds no execution result", "execution_result_content")
    names, codes = result.get("test_file_names") or [], result.get("test_file_codes") or []
    if not names or len(names) != len(codes):
        raise RowRefused("holds no hidden test files", "execution_result_content")
    return dict(zip(names, codes, strict=True))


def parse_log(log: str) -> dict[str, str]:
    """R2E-Gym's parse_log_pytest: the ``short test summary info`` lines, test names without
    their file (``Class.test``), PASSED / FAILED / ERROR."""
    if "short test summary info" not in log:
        return {}
    statuses: dict[str, str] = {}
    for line in log.split("short test summary info")[1].strip().split("\n"):
        name = ".".join(line.split("::")[1:])
        if "PASSED" in line:
            statuses[name] = "PASSED"
        elif "FAILED" in line:
            statuses[name.split(" - ")[0]] = "FAILED"
        elif "ERROR" in line:
            statuses[name.split(" - ")[0]] = "ERROR"
    return statuses


def reward(output: str, expected_json: str) -> tuple[float, dict[str, Any]]:
    """R2E-Gym's reward for a run's output, and what it compared."""
    parsed = {_ANSI_KEY.sub("", k): v for k, v in parse_log(_ANSI_LOG.sub("", output)).items()}
    expected = {_ANSI_KEY.sub("", k): v for k, v in json.loads(expected_json).items()}
    parsed = {k.split(" - ")[0]: parsed[k] for k in sorted(parsed)}
    expected = {k.split(" - ")[0]: expected[k] for k in sorted(expected)}
    # R2E-Gym raises KeyError for a parsed test it does not expect when the counts agree:
    # no reward either way
    mismatched = sorted(k for k in parsed if expected.get(k) != parsed[k])
    score = 1.0 if len(parsed) == len(expected) and not mismatched else 0.0
    details = {"expected": len(expected), "parsed": len(parsed), "mismatched": mismatched}
    return score, details


def run_output(log: str) -> str | None:
    """What run_tests.sh printed: the eval script's log between its markers (None: no run)."""
    if _RUN_START not in log or _RUN_END not in log:
        return None
    return log[log.find(_RUN_START) + len(_RUN_START) : log.rfind(_RUN_END)]


def published_runs(instance: Instance) -> tuple[str, str]:
    """The runs of the hidden tests R2E-Gym made after the commit and before it, as logs of
    sweflow's eval script (the output between its markers)."""
    result = json_value(
        (instance.model_extra or {}).get("execution_result_content"), "execution_result_content"
    )
    return tuple(  # type: ignore[return-value]
        f"{_RUN_START}\n{result.get(key) or ''}\n{_RUN_END}\n"
        for key in ("new_commit_res_stdout", "old_commit_res_stdout")
    )


def _nodeid_statuses(stdout: str | None) -> dict[str, str]:
    """pytest node id -> status from a -rA summary (swebench's parse_log_pytest lines)."""
    statuses = {}
    for line in _ANSI_LOG.sub("", stdout or "").split("\n"):
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL"):
            statuses[parts[1]] = parts[0]
    return statuses


def _file_diff(diff: Mapping[str, Any]) -> str:
    """One file of R2E-Gym's parsed commit as unified diff text (FileDiff.get_patch)."""
    path = diff["header"]["file"]["path"]
    text = f"diff --git a/{path} b/{path}\n"
    if diff["header"].get("misc_line"):
        text += diff["header"]["misc_line"] + "\n"
    if index := diff.get("index_line"):
        mode = f" {index['mode']}" if index.get("mode") else ""
        text += f"index {index['old_commit_hash']}..{index['new_commit_hash']}{mode}\n"
    if diff.get("is_binary_file"):
        text += (diff.get("binary_line") or "") + "\n"
    if diff.get("minus_file") and diff.get("plus_file"):
        text += f"--- {diff['minus_file']['path']}\n+++ {diff['plus_file']['path']}\n"
    marks = {"context": " ", "added": "+", "deleted": "-", "note": "\\ "}
    for hunk in diff.get("hunks") or []:
        desc = hunk["descriptor"]
        old, new = desc["old_range"], desc["new_range"]
        ranges = [
            f"{r['start']}" + (f",{r['length']}" if r.get("length") is not None else "")
            for r in (old, new)
        ]
        text += (
            f"@@ -{ranges[0]} +{ranges[1]} @@"
            + (f" {desc['section']}" if desc.get("section") else "")
            + "\n"
        )
        for line in hunk["line_group"]["all_lines"]:
            text += marks[line["type"]] + line["content"] + "\n"
    return text


def is_test_file(path: str) -> bool:
    """R2E-Gym's FileDiff.is_test_file."""
    parts = path.split("/")
    return (
        path.endswith("_test.py")
        or path.startswith("test_")
        or parts[-1].startswith("test_")
        or any(p in ("tests", "Tests", "test", "Test") for p in parts)
    )


def gold_patch(commit: Mapping[str, Any]) -> str:
    """The commit's non-test Python files (ParsedCommit.get_patch(test_file=False))."""
    return "".join(
        _file_diff(d)
        for d in commit["file_diffs"]
        if d["header"]["file"]["path"].endswith(".py")
        and not is_test_file(d["header"]["file"]["path"])
    )


class R2EGymGrading(FormatGrading):
    def eval_script(self, instance: Instance, spec: EnvSpec | None, activate: str) -> str:
        tests = hidden_tests(instance)
        extra = instance.model_extra or {}
        command = tests_command(str(extra.get("repo_name")), list(tests))
        lines = ["#!/bin/bash", "set -uxo pipefail", f"cd {REPO_DIR}", "rm -rf r2e_tests"]
        lines.append("mkdir -p r2e_tests")
        for name, code in tests.items():
            tag = "R2E_TEST_" + hashlib.sha256(code.encode()).hexdigest()[:16]
            lines.append(f"cat > r2e_tests/{name} <<'{tag}'\n{code}\n{tag}")
        lines += [
            "find . -name '*.pyc' -delete",
            "find . -name '__pycache__' -exec rm -rf {} +",
            f": '{START_TEST_OUTPUT}'",
            command,
            f": '{END_TEST_OUTPUT}'",
        ]
        return "\n".join(lines) + "\n"

    def statuses(self, instance: Instance, log: str) -> tuple[dict[str, str], bool]:
        output = run_output(log)
        return _nodeid_statuses(output), output is not None and "short test summary info" in output

    def report(self, instance: Instance, log: str) -> dict[str, Any]:
        output = run_output(log) or ""
        expected = (instance.model_extra or {}).get("expected_output_json")
        score, details = reward(
            output, expected if isinstance(expected, str) else json.dumps(expected)
        )
        return {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": True,
            "resolved": score == 1.0,
            "reward": score,
            "tests_status": details,
            "summary": f"{details['expected'] - len(details['mismatched'])}/{details['expected']}"
            " hidden tests end as R2E-Gym expects",
        }


class R2EGym(DatasetFormat):
    name = "r2e-gym"
    required = (
        "repo_name",
        "docker_image",
        "commit_hash",
        "expected_output_json",
        "execution_result_content",
        "parsed_commit_content",
    )
    description = "R2E-Gym: commits with hidden tests (R2E-Gym/R2E-Gym-Lite, -Subset, -V1)"
    grading = R2EGymGrading()

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        name = str(row["repo_name"])
        if name not in REPOS:
            raise RowRefused(
                f"unknown R2E-Gym repository {name!r} (known: {', '.join(REPOS)})", "repo_name"
            )
        commit = json_value(row["parsed_commit_content"], "parsed_commit_content")
        hidden_tests(row)  # refused here, before any build, when the row has none
        result = json_value(row["execution_result_content"], "execution_result_content")
        new = _nodeid_statuses(result.get("new_commit_res_stdout"))
        old = _nodeid_statuses(result.get("old_commit_res_stdout"))
        passing = sorted(t for t, s in new.items() if s == "PASSED")
        return {
            "instance_id": f"{name}__{row['commit_hash']}",
            "repo": REPOS[name],
            "base_commit": commit["old_commit_hash"],
            "version": RECIPE_VERSION,
            "patch": gold_patch(commit),
            "FAIL_TO_PASS": [t for t in passing if old.get(t) != "PASSED"],
            "PASS_TO_PASS": [t for t in passing if old.get(t) == "PASSED"],
            "log_parser": "parse_log_pytest",
        }

    def image(self, row: Mapping[str, Any]) -> str | None:
        return str(row["docker_image"])

    def recipes(self, rows: Iterable[Instance]) -> SpecTable:
        """R2E-Gym's install scripts as specs (sweflow/data/r2egym_recipes.yaml), for the rows'
        repositories that have one; the others run on their images."""
        table: dict[str, dict[str, Any]] = {}
        for row in rows:
            name = str((row.model_extra or {}).get("repo_name"))
            recipe = recipes().get(name)
            if recipe is None:
                continue
            table.setdefault(row.repo, {})[RECIPE_VERSION] = {
                **{k: recipe[k] for k in ("python", "pypi_cutoff", "pre_install") if k in recipe},
                # then the venv where R2E-Gym's test command runs it (/testbed/.venv)
                "install": " && ".join([*recipe["install"], LINK_VENV]),
                "test_cmd": tests_command(name, []),
                "log_parser": "parse_log_pytest",
            }
        return SpecTable.from_mapping(table, source="R2E-Gym install scripts")


@functools.cache
def recipes() -> dict[str, dict[str, Any]]:
    """R2E-Gym's install scripts by repository name (sweflow/data/r2egym_recipes.yaml)."""
    text = resources.files("sweflow.data").joinpath("r2egym_recipes.yaml").read_text()
    return yaml.safe_load(text)


FORMAT = R2EGym()
