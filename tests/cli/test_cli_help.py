"""Every command's help ends with an example and shows its options whole at 80 columns."""

from __future__ import annotations

import pytest
from conftest import cli_commands
from typer.testing import CliRunner

from sweflow.cli import app

runner = CliRunner()
COMMANDS = cli_commands()


def test_the_walk_finds_the_whole_tree() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"sandbox run", "env build", "eval", "bench pipeline", "bench cli"} <= names


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_has_an_example_and_whole_option_names(path, command) -> None:
    assert "Example" in (command.help or ""), f"sweflow {' '.join(path)}: no example in its help"
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    shown = result.output
    for param in command.params:
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("-"):
                assert name in shown, f"sweflow {' '.join(path)} --help cuts {name} at 80 columns"
