"""Every example line of every command's help runs, up to where its work would start.

Each example is run as written, with ``sweflow --dry-run`` (the command checks its options and
inputs, then stops where its work starts) from a scratch directory (tests/cli_dryrun.py): the
repository's own paths (``data/demo``, ``configs/...``) are made absolute, the inputs an example
names as placeholders (``tasks.jsonl``, ``preds.json``, ``runs/sft/model``...) are made there,
and absolute paths are moved into it. An example whose options are wrong fails here: `train rl`
without its required ``--store`` did, and ``pipeline config --json`` worked only from the
repository root (issue 29).
"""

from __future__ import annotations

import re

import pytest
from cli_dryrun import check_dry_run
from conftest import cli_commands

EMBEDDED = re.compile(r"\$\((sweflow [^)]*)\)")  # an example inside another command's line


def _examples() -> list[tuple[tuple[str, ...], str]]:
    """(command path, example line) for every example line of every command's help."""
    found = []
    for path, command in cli_commands():
        _, _, tail = (command.help or "").partition("Example")  # type: ignore[attr-defined]
        for line in tail.splitlines()[1:]:
            line = line.strip()
            if embedded := EMBEDDED.search(line):
                line = embedded.group(1)
            if line.startswith("sweflow "):
                found.append((path, line))
    return found


EXAMPLES = _examples()


def test_every_command_has_examples_found_here() -> None:
    assert {path for path, _ in cli_commands()} == {path for path, _ in EXAMPLES}


@pytest.mark.parametrize("path,example", EXAMPLES, ids=[e for _, e in EXAMPLES])
def test_the_example_runs_up_to_its_work(path, example, tmp_path, monkeypatch) -> None:
    check_dry_run(example, tmp_path, monkeypatch)
