"""The formatter owns the layout: ``ruff format`` and ``ruff check`` pass on the whole checkout.

One line length (pyproject.toml's ``[tool.ruff]``), no hand-wrapped lines kept against the
formatter (no ``fmt: skip`` or ``fmt: off`` comments): a change that is not formatted fails
here, not in review.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile("#" + r"\s*fmt:\s*(skip|off)")  # split, so that this file does not match


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "check"])
def test_ruff_passes_on_the_checkout(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_line_is_kept_out_of_the_formatter() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = [name for name in tracked if MARKER.search((REPO / name).read_text(errors="replace"))]
    assert not marked, f"lines kept out of the formatter in {marked}"
