"""Apply a patch in a sandbox exactly the way swebench 5's ``run_instance`` does.

Each of the harness's ``GIT_APPLY_CMDS`` is tried on the patch file in turn (git apply, --3way,
--reject, then ``patch --fuzz=5``), the tree reset to pristine before every retry; when all fail,
``git apply --check --reverse`` may still find the patch fully applied. The commands are the
harness's own list, imported, so a new swebench release changes both sides at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS, CONTAINER_PATCH_FILE
from swebench.harness.run_evaluation import GIT_APPLY_CMDS

from sweflow.harness.runlog import RunLog
from sweflow.sandbox import Sandbox

REPO_DIR = "/testbed"
RESET = "git checkout -- . ; git clean -fd"


@dataclass(frozen=True)
class Applied:
    """Whether the patch went in, and the output of the last command tried."""

    ok: bool
    output: str
    timed_out: bool = False


def apply_patch(sandbox: Sandbox, patch: str, log: RunLog, timeout: float) -> Applied:
    """Write ``patch`` to the harness's patch file and run the harness's apply chain on it."""
    sandbox.write(CONTAINER_PATCH_FILE, patch)
    output = ""
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:  # a failed attempt (--reject) leaves partial state behind
            sandbox.exec(RESET, timeout=timeout, cwd=REPO_DIR)
        result = sandbox.exec(f"{command} {CONTAINER_PATCH_FILE}", timeout=timeout, cwd=REPO_DIR)
        output = result.output
        if result.timed_out:
            log.info(f"{APPLY_PATCH_FAIL}: {command} timed out after {timeout} s")
            return Applied(False, output, timed_out=True)
        if result.exit_code == 0:
            log.info(f"{APPLY_PATCH_PASS}:\n{output}")
            return Applied(True, output)
        log.info(f"Failed to apply patch to container: {command}")
    reverse = sandbox.exec(
        f"git apply --check --reverse {CONTAINER_PATCH_FILE}", timeout=timeout, cwd=REPO_DIR
    )
    if reverse.exit_code == 0 and not reverse.timed_out:
        log.info(f"{APPLY_PATCH_PASS}: verified already applied")
        return Applied(True, output)
    log.info(f"{APPLY_PATCH_FAIL}:\n{output}")
    return Applied(False, output)
