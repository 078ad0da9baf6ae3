"""The CI time guard of tests/conftest.py: past the cutoff, slow tests are skipped with the
reason and every other test still runs (a run that would overrun CI's 90 minutes loses a few
slow verdicts, not all of them)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

@pytest.mark.slow
def test_slow():
    pass

def test_quick():
    pass
"""


def _run(tmp_path: Path, minutes_in: float, until: str | None) -> str:
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "SWEFLOW_TEST_BEGAN": str(time.time() - minutes_in * 60),
    }
    env.pop("SWEFLOW_SLOW_UNTIL_MIN", None)
    if until is not None:
        env["SWEFLOW_SLOW_UNTIL_MIN"] = until
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conftest",
            "-rs",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestUnknownMarkWarning",
            str(tmp_path / "test_suite.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_a_slow_test_due_after_the_cutoff_is_skipped_with_the_reason(tmp_path: Path) -> None:
    out = _run(tmp_path, minutes_in=75, until="70")
    assert "1 passed, 1 skipped" in out, out
    assert "the run is 75 minutes in, past SWEFLOW_SLOW_UNTIL_MIN=70" in out


def test_before_the_cutoff_or_without_one_every_test_runs(tmp_path: Path) -> None:
    assert "2 passed" in _run(tmp_path, minutes_in=10, until="70")
    assert "2 passed" in _run(tmp_path, minutes_in=500, until=None)
