"""Eval scripts in the SWE-bench harness shape, run in a sandbox and graded by swebench's parsers.

A row's own ``eval_script`` (swebench 5 datasets carry one) is used as is; otherwise one is made
from the environment spec the way swebench 4.x made them for classic rows: record the repository
state, re-run ``install``, reset the test files, apply ``test_patch``, run ``test_cmd`` on the
test directives between the start/end markers (visible in the log through ``set -x``), and reset
again; a spec with ``emulated_hosts`` starts its emulated internet first. Parsing goes through
swebench's own ``get_logs_eval``, so a status here is exactly the harness's status for the same
log.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    END_TEST_OUTPUT,
    NON_TEST_EXTS,
    START_TEST_OUTPUT,
)
from swebench.harness.grading import get_logs_eval
from swebench.harness.utils import make_test_spec
from swebench.types import TestSpec
from unidiff import PatchSet

from sweflow.harness import internet
from sweflow.harness.apply import REPO_DIR, apply_patch
from sweflow.harness.runlog import RunLog
from sweflow.harness.specs import EnvSpec, test_command
from sweflow.instances import Instance
from sweflow.sandbox import SandboxFileError

HEREDOC = "EOF_114329324912"  # the harness's delimiter, so scripts compare line for line
DEFAULT_LOG_PARSER = "parse_log_pytest"
DEFAULT_EVAL_TYPE = "pass_and_fail"
# Offline sandboxes: the eval script's re-install fails at once instead of retrying an index
# (pip's five retries with backoff add ~8 s); what the build installed stays in place.
OFFLINE_PIP = "export PIP_NO_INDEX=1"


def patch_files(patch: str) -> list[str]:
    """Paths a unified diff touches (the new name for renames/additions)."""
    files = []
    for patched in PatchSet(patch):
        path = patched.target_file if patched.target_file != "/dev/null" else patched.source_file
        files.append(path[2:] if path.startswith(("a/", "b/")) else path)
    return files


def modified_and_new_files(patch: str) -> tuple[list[str], list[str]]:
    """Files the diff changes that exist before it, and files it creates (as the harness splits
    them: the first are reset with ``git checkout``, the second removed)."""
    modified, new = [], []
    for patched in PatchSet(patch):
        if patched.source_file == "/dev/null":
            new.append(patched.target_file.removeprefix("b/"))
        else:
            modified.append(patched.source_file.removeprefix("a/"))
    return modified, new


def test_directives(test_patch: str, style: str = "files") -> list[str]:
    """What the test command is given: the test patch's files minus NON_TEST_EXTS (a data file
    or a ``.toml`` is never handed to the test runner), as Django module paths for ``django``,
    or the ``[case NAME]`` names of mypy's data-driven tests as one -k expression."""
    if style == "mypy_cases":  # SWE-Gym's fork: pytest -k "case1 or case2"
        cases = re.findall(r"\[case ([^\]]+)\]", test_patch)
        return ['"' + " or ".join(cases) + '"']
    found = re.findall(r"diff --git a/.* b/(.*)", test_patch)
    directives = [d for d in found if not d.endswith(tuple(NON_TEST_EXTS))]
    if style == "django":
        directives = [
            d.removesuffix(".py").removeprefix("tests/").replace("/", ".") for d in directives
        ]
    return directives


test_directives.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def make_eval_script(instance: Instance, spec: EnvSpec, activate: str = "") -> str:
    """The instance's eval script: its own when it has one, else the one swebench 4.x generated
    for the spec (the harness's commands in its order, a venv in place of conda)."""
    if instance.eval_script:
        return instance.eval_script
    modified, new = modified_and_new_files(instance.test_patch) if instance.test_patch else ([], [])
    reset = []
    if modified:
        reset.append(f"git checkout {instance.base_commit} {' '.join(modified)}")
    if new:
        reset.append(f"rm -f {' '.join(new)}")
    directives = test_directives(instance.test_patch, spec.test_directives)
    enter = [*([activate] if activate else []), f"cd {REPO_DIR}"]
    online = [internet.start_command(spec.emulated_hosts)] if spec.emulated_hosts else []
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        *enter,
        *online,
        *spec.eval_commands,
        f"git config --global --add safe.directory {REPO_DIR}",
        f"cd {REPO_DIR}",
        "git status",
        "git show -s",  # the harness's `git show`; a one-commit repository would print it whole
        f"git -c core.fileMode=false diff {instance.base_commit}",
        *([activate] if activate else []),
    ]
    if spec.install:
        lines += [OFFLINE_PIP, spec.install]
    lines += reset
    if instance.test_patch:
        lines += [f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}"]
    lines += [
        f": '{START_TEST_OUTPUT}'",
        test_command(spec, directives),
        f": '{END_TEST_OUTPUT}'",
        *reset,
    ]
    return "\n".join(lines) + "\n"


def test_spec_for(instance: Instance, eval_script: str, log_parser: str = "") -> TestSpec:
    """A swebench TestSpec for the instance, filling the swebench-5 fields it may lack: the
    row's own log parser first, then ``log_parser`` (the spec's, e.g. parse_log_sympy)."""
    row = instance.to_row(lists=True)
    row.update(
        eval_script=eval_script,
        image=instance.image or f"sweflow/{instance.instance_id.lower()}",
        log_parser=instance.log_parser or log_parser or DEFAULT_LOG_PARSER,
        eval_type=instance.eval_type or DEFAULT_EVAL_TYPE,
    )
    return make_test_spec(row)


test_spec_for.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


@dataclass
class EvalRun:
    """One run of an eval script: its log on disk and the per-test statuses swebench read."""

    log_path: Path
    statuses: dict[str, str] = field(default_factory=dict)
    parsed: bool = False
    patch_applied: bool = True
    timed_out: bool = False


# A dataset format's reading of a test log: test -> status, and whether the log had a run.
StatusReader = Callable[[str], tuple[dict[str, str], bool]]
EVAL_SCRIPT_PATH = "/eval.sh"  # where run_instance copies it in the container
TEST_OUTPUT_PATH = "/tmp/.sweflow-test-output"


@dataclass(frozen=True)
class EvalOutput:
    """What running the eval script left: the log on disk, and whether it ran out of time."""

    log_path: Path
    timed_out: bool


def run_eval_script(
    sandbox, spec: TestSpec, log_path: Path, timeout: float, env: dict[str, str] | None = None
) -> EvalOutput:
    """Run the spec's eval script like run_instance: ``/bin/bash /eval.sh``, stdout and stderr
    merged into ``log_path`` (the harness's test_output.txt), its timeout note appended.
    ``env`` adds variables (the tamper guard's plugin; none for the harness's own run).

    The output goes to a file inside the sandbox and is read back whole, so a long test log is
    never cut the way an exec result's output is.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sandbox.write(EVAL_SCRIPT_PATH, spec.eval_script)
    command = f"/bin/bash {EVAL_SCRIPT_PATH} >{TEST_OUTPUT_PATH} 2>&1"
    result = sandbox.exec(command, timeout=timeout, env=env)
    try:
        text = sandbox.read(TEST_OUTPUT_PATH).decode(errors="replace")
    except SandboxFileError:
        text = result.output
    if result.timed_out:
        text += f"\n\nTimeout error: {timeout} seconds exceeded."
    log_path.write_text(text)
    return EvalOutput(log_path, result.timed_out)


def run_eval(
    sandbox,
    instance: Instance,
    spec: TestSpec,
    log_path: Path,
    *,
    patch: str | None,
    timeout: float,
    statuses: StatusReader | None = None,
) -> EvalRun:
    """Apply ``patch`` (if any) the way the harness does, run the eval script, parse the log
    (with swebench's parser, or ``statuses``: a dataset format's own reading of its log).

    The apply chain's own output goes to ``<log>.apply.log``, not into the test log: the harness
    grades the eval script's output alone.
    """
    if patch:
        with_log = RunLog(instance.instance_id, log_path.with_suffix(".apply.log"))
        try:
            applied = apply_patch(sandbox, patch, with_log, timeout)
        finally:
            with_log.close()
        if not applied.ok:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(f"{applied.output}\n{APPLY_PATCH_FAIL}\n")
            return EvalRun(log_path, patch_applied=False)
    out = run_eval_script(sandbox, spec, log_path, timeout)
    if out.timed_out:
        return EvalRun(log_path, timed_out=True)
    if statuses is not None:
        found, parsed = statuses(log_path.read_text())
    else:
        found, parsed = get_logs_eval(spec, str(log_path))
    return EvalRun(log_path, statuses=found, parsed=parsed)
