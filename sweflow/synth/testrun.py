"""One run of a repository's test suite in a sandbox, read with swebench's own log parser.

Using the harness's parser here means a test that counts as failing for synthesis counts as
failing for grading too: the FAIL_TO_PASS lists we emit are in the grader's own test names.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from swebench.harness.constants import TestStatus
from swebench.harness.log_parsers import PARSER_REGISTRY

from sweflow.harness.specs import EnvSpec, test_command
from sweflow.sandbox import Sandbox

WIDE = {"COLUMNS": "400"}
PASSING = {TestStatus.PASSED.value, TestStatus.XFAIL.value}
# pytest -rA: "FAILED tests/test_a.py::test_b - AssertionError: assert 1 == 2"
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+) - (.+)$", re.MULTILINE)


@dataclass
class SuiteRun:
    statuses: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    timed_out: bool = False
    exit_code: int = 0

    @property
    def passing(self) -> set[str]:
        return {t for t, s in self.statuses.items() if s in PASSING}


def run_suite(
    sandbox: Sandbox,
    spec: EnvSpec,
    *,
    timeout: float,
    log_parser: str = "parse_log_pytest",
    log_path: Path | None = None,
) -> SuiteRun:
    """Run the whole suite (``test_cmd`` with no files) in the repo and parse its log."""
    start = time.monotonic()
    # A wide terminal, so that pytest's summary lines keep the whole failure message.
    result = sandbox.exec(f"{test_command(spec, [])} 2>&1", timeout=timeout, env=WIDE)
    seconds = round(time.monotonic() - start, 3)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(result.output)
    if result.timed_out:
        return SuiteRun(seconds=seconds, timed_out=True, exit_code=result.exit_code)
    statuses = PARSER_REGISTRY[log_parser](result.output, None)
    messages = {m[1]: m[2].strip()[:300] for m in _FAILED_LINE.finditer(result.output)}
    return SuiteRun(statuses, messages, seconds, exit_code=result.exit_code)
