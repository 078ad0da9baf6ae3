"""A long benchmark's run folder that a re-run with the same settings continues.

``bench learn`` takes hours; every stage of it already finds its saved work in its folder (the
teacher's trajectories, the published SFT model, graded agent runs, RL checkpoints). So a run
cut short (Ctrl-C, a lost session) is continued by running the same command again: the newest
unfinished folder whose settings match is reused, and the time every invocation spent in it adds
up to the run's minutes.

A run whose settings differ from an earlier run's only in what later stages do (``bench learn``
with other RL settings) starts from that run's earlier stages: their folders are copied into the
new one (a published model's files hard-linked, training checkpoints left out), and the stages
find their work done, as in a continued run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweflow.files import write_atomic

SETTINGS = "settings.json"  # what the run was started with: a re-run must match it to continue
SPENT = "spent.json"  # seconds spent by the invocations before the current one
LINKED = "model"  # a published model's folder: written once, its files hard-linked when copied
LEFT_OUT = "checkpoints"  # training state a published model no longer needs


@dataclass
class RunFolder:
    """A run's folder and the clock of the time spent in it, over every invocation."""

    path: Path
    earlier_s: float = 0.0
    resumed: bool = False
    stages_from: Path | None = None  # the earlier run whose first stages it started from
    began: float = field(default_factory=time.monotonic)

    def seconds(self) -> float:
        return self.earlier_s + time.monotonic() - self.began

    def minutes(self) -> float:
        return round(self.seconds() / 60, 1)

    def save_time(self) -> None:
        """Records the time spent so far, for an invocation that continues this one."""
        write_atomic(self.path / SPENT, json.dumps({"seconds": self.seconds()}))


def open_run_folder(
    runs: Path,
    settings: dict[str, Any],
    result: str,
    stages: Sequence[str] = (),
    stages_key: Callable[[dict], Any] | None = None,
) -> RunFolder:
    """The newest folder under ``runs`` started with ``settings`` and holding no ``result`` file
    yet (continued), else a new one named by the time it starts, holding a copy of the
    ``stages`` folders of the newest earlier run whose settings differ but have the same
    ``stages_key``."""
    wanted = json.loads(json.dumps(settings))  # as it reads back: tuples are lists
    folders = sorted(runs.iterdir(), reverse=True) if runs.is_dir() else []
    earlier = [(folder, _read_json(folder / SETTINGS)) for folder in folders]
    for folder, started_with in earlier:
        if not (folder / result).exists() and started_with == wanted:
            spent = folder / SPENT
            seconds = (_read_json(spent) or {}).get("seconds", 0.0)
            return RunFolder(folder, seconds, resumed=True)
    runs.mkdir(parents=True, exist_ok=True)
    stamp, n = time.strftime("%Y%m%dT%H%M%S"), 1
    folder = runs / stamp
    while folder.exists():  # another run started in the same second
        n += 1
        folder = runs / f"{stamp}-{n}"
    folder.mkdir()
    run = RunFolder(folder)
    if stages_key is not None:
        key = stages_key(wanted)  # the same settings again measure again, from the start
        source = next(
            (
                f
                for f, started_with in earlier
                if started_with not in (None, wanted) and stages_key(started_with) == key
            ),
            None,
        )
        if source is not None:
            for stage in stages:
                if (source / stage).is_dir():
                    _copy_stage(source / stage, folder / stage)
            run.stages_from = source
    # written last: a folder cut short while its stages were copied is never continued
    (folder / SETTINGS).write_text(json.dumps(wanted, indent=1) + "\n")
    return run


def _copy_stage(source: Path, target: Path) -> None:
    """``source``'s tree at ``target``: files copied (stages append to logs, rewrite records),
    a published model's files hard-linked, training checkpoints left out."""

    def copy(src: str, dst: str) -> None:
        if LINKED in Path(src).relative_to(source).parts:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns(LEFT_OUT), copy_function=copy, symlinks=True
    )


def _read_json(path: Path) -> Any:
    """The file's JSON; None when it is absent or cut short (a kill while it was written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
