"""Running a `sweflow ...` line as written, under ``sweflow --dry-run``, from a scratch directory.

Shared by the help examples' test (tests/cli/test_cli_examples.py) and the docs' test
(tests/project/test_docs.py): the repository's own paths (``data/demo``, ``configs/...``) are made
absolute, the inputs a line names as placeholders (``tasks.jsonl``, ``preds.json``,
``runs/sft/model``...) are made in the scratch directory, absolute paths are moved into it, and
the command must stop where its work would start, having written nothing.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from sweflow.agent.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
NO_WORK = {("version",), ("pipeline", "config"), ("pipeline", "plan"), ("pipeline", "stages")}


def demo_ids() -> list[str]:
    """The first two demo instance ids: what a placeholder id (``-i A,B``) becomes."""
    return [json.loads(line)["instance_id"] for line in (DEMO / "tasks.jsonl").open()][:2]


def scratch(root: Path, instance_ids: list[str]) -> None:
    """The inputs the lines name as placeholders, made in ``root`` (the working directory)."""
    for name in ("tasks.jsonl", "specs.yaml"):
        shutil.copy(DEMO / name, root / name)
    for name in ("repos", "mirrors"):
        (root / name).symlink_to(DEMO / "repos")
    rows = [json.loads(line) for line in (DEMO / "tasks.jsonl").read_text().splitlines()]
    (root / "lite.json").write_text(json.dumps(rows[:2]))
    gold = [
        {"instance_id": r["instance_id"], "model_patch": r["patch"], "model_name_or_path": "m"}
        for r in rows[:2]
    ]
    (root / "preds.json").write_text(json.dumps(gold))
    conversation = {
        "instance_id": instance_ids[0],
        "messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "done"},
        ],
    }
    sft_data = ("sft.jsonl", "runs/collect/sft.jsonl", "runs/gold/sft.jsonl", "runs/round2.jsonl")
    for path in (root / name for name in sft_data):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(conversation) + "\n")
    run = Trajectory(instance_id=instance_ids[0], messages=conversation["messages"])
    run.save(root / "runs" / "infer" / "trajectories" / instance_ids[0] / "run-0.json")
    for model in ("sft", "rl"):
        (root / "runs" / model / "model").mkdir(parents=True)
        (root / "runs" / model / "model" / "config.json").write_text("{}")
    (root / "site").mkdir()
    (root / "images").mkdir()  # a folder of saved images (--images)
    for folder in ("layers", "manifests"):  # an empty store, for the commands that read one
        (root / "store" / folder).mkdir(parents=True)


def argv(line: str, root: Path, instance_ids: list[str]) -> list[str]:
    """The line's arguments after ``sweflow``: repository paths absolute, absolute paths moved
    into ``root``, the placeholder instance ids (``-i A,B``) made real ones."""
    args = []
    for arg in shlex.split(line, comments=True)[1:]:
        if arg == "A,B":
            arg = ",".join(instance_ids[:2])
        elif arg.startswith(("/", "~")):
            arg = str(root / arg.lstrip("/~"))
        elif arg.rstrip("/") and (REPO / arg).exists() and not (root / arg).exists():
            arg = str(REPO / arg)
        args.append(arg)
    return args


def scratch_stores(args: list[str]) -> None:
    """An empty layer store wherever a line names a store that is not there."""
    from sweflow.envcache.store import LayerStore

    for option, value in zip(args, args[1:], strict=False):
        if option in ("--store", "-s") and not Path(value).exists():
            LayerStore(Path(value))


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def dry_run(line: str, root: Path, monkeypatch) -> tuple[list[str], int, str, set[str]]:
    """Run ``line`` under ``sweflow --dry-run`` in the scratch directory ``root``: its arguments,
    exit code, output, and the paths it wrote there."""
    from sweflow.cli import app

    ids = demo_ids()
    scratch(root, ids)
    monkeypatch.chdir(root)
    args = argv(line, root, ids)
    scratch_stores(args)
    before = snapshot(root)
    result = CliRunner().invoke(app, ["--dry-run", *args], env={"COLUMNS": "200"})
    return args, result.exit_code, result.output, snapshot(root) - before


def check_dry_run(line: str, root: Path, monkeypatch) -> None:
    """``line`` passes its checks and stops where its work would start, writing nothing (but
    for the commands whose whole work is to print, which run whole)."""
    args, code, said, wrote = dry_run(line, root, monkeypatch)
    assert code == 0, f"{line}\n{said}"
    if command_path(args) not in NO_WORK:
        assert "dry run: checked; would " in said, f"{line}: not stopped where work starts"
        assert not wrote, f"{line}: wrote {wrote}"


def command_path(args: list[str]) -> tuple[str, ...]:
    """The command a line runs (``("env", "build")``), from its arguments after ``sweflow``."""
    from conftest import cli_commands

    paths = {path for path, _ in cli_commands()}
    words = tuple(a for a in args[:2] if not a.startswith("-"))
    for n in (2, 1):
        if words[:n] in paths:
            return words[:n]
    return words
