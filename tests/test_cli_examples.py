"""Every example line of every command's help runs, up to where its work would start.

Each example is run as written, with ``sweflow --dry-run`` (the command checks its options and
inputs, then stops where its work starts) from a scratch directory: the repository's own paths
(``data/demo``, ``configs/...``) are made absolute, the inputs an example names as placeholders
(``tasks.jsonl``, ``preds.json``, ``runs/sft/model``...) are made there, and absolute paths are
moved into it. An example whose options are wrong fails here: `train rl` without its required
``--store`` did, and ``pipeline config --json`` worked only from the repository root (issue 29).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import cli_commands
from typer.testing import CliRunner

from sweflow.agent.trajectory import Trajectory
from sweflow.cli import app

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
NO_WORK = {("version",), ("pipeline", "config"), ("pipeline", "stages")}  # they run whole
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


def _scratch(root: Path, instance_ids: list[str]) -> None:
    """The inputs the examples name as placeholders, made in ``root`` (the working directory)."""
    for name in ("tasks.jsonl", "specs.yaml"):
        shutil.copy(DEMO / name, root / name)
    for name in ("repos", "mirrors"):
        (root / name).symlink_to(DEMO / "repos")
    rows = [json.loads(line) for line in (DEMO / "tasks.jsonl").read_text().splitlines()]
    (root / "lite.json").write_text(json.dumps(rows[:2]))
    gold = [{"instance_id": r["instance_id"], "model_patch": r["patch"],
             "model_name_or_path": "m"} for r in rows[:2]]  # fmt: skip
    (root / "preds.json").write_text(json.dumps(gold))
    conversation = {
        "instance_id": instance_ids[0],
        "messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "done"},
        ],
    }
    for path in (root / "sft.jsonl", root / "runs" / "collect" / "sft.jsonl"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(conversation) + "\n")
    run = Trajectory(instance_id=instance_ids[0], messages=conversation["messages"])
    run.save(root / "runs" / "infer" / "trajectories" / instance_ids[0] / "run-0.json")
    (root / "runs" / "sft" / "model").mkdir(parents=True)
    (root / "runs" / "sft" / "model" / "config.json").write_text("{}")
    (root / "site").mkdir()
    for folder in ("layers", "manifests"):  # an empty store, for the commands that read one
        (root / "store" / folder).mkdir(parents=True)


def _argv(example: str, root: Path, instance_ids: list[str]) -> list[str]:
    """The example's arguments: repository paths absolute, absolute paths moved into ``root``,
    the placeholder instance ids (``-i A,B``) made real ones."""
    argv = []
    for arg in shlex.split(example, comments=True)[1:]:
        if arg == "A,B":
            arg = ",".join(instance_ids[:2])
        elif arg.startswith(("/", "~")):
            arg = str(root / arg.lstrip("/~"))
        elif arg.rstrip("/") and (REPO / arg).exists() and not (root / arg).exists():
            arg = str(REPO / arg)
        argv.append(arg)
    return argv


def _scratch_stores(argv: list[str]) -> None:
    """An empty layer store wherever an example names a store that is not there."""
    from sweflow.envcache.store import LayerStore

    for option, value in zip(argv, argv[1:], strict=False):
        if option in ("--store", "-s") and not Path(value).exists():
            LayerStore(Path(value))


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("path,example", EXAMPLES, ids=[e for _, e in EXAMPLES])
def test_the_example_runs_up_to_its_work(path, example, tmp_path, monkeypatch) -> None:
    ids = [json.loads(line)["instance_id"] for line in (DEMO / "tasks.jsonl").open()][:2]
    _scratch(tmp_path, ids)
    monkeypatch.chdir(tmp_path)
    argv = _argv(example, tmp_path, ids)
    _scratch_stores(argv)
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, ["--dry-run", *argv], env={"COLUMNS": "200"})
    said = result.output
    assert result.exit_code == 0, f"{example}\n{said}"
    if path not in NO_WORK:
        assert "dry run: checked; would " in said, f"{example}: not stopped where work starts"
        assert _snapshot(tmp_path) == before, f"{example}: wrote {_snapshot(tmp_path) - before}"
