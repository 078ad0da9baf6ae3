"""A long benchmark's run folder that a re-run with the same settings continues.

``bench learn`` takes hours; every stage of it already finds its saved work in its folder (the
teacher's trajectories, the published SFT model, graded agent runs, RL checkpoints). So a run
cut short (Ctrl-C, a lost session) is continued by running the same command again: the newest
unfinished folder whose settings match is reused, and the time every invocation spent in it adds
up to the run's minutes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweflow.envcache.storefiles import write_atomic

SETTINGS = "settings.json"  # what the run was started with: a re-run must match it to continue
SPENT = "spent.json"  # seconds spent by the invocations before the current one


@dataclass
class RunFolder:
    """A run's folder and the clock of the time spent in it, over every invocation."""

    path: Path
    earlier_s: float = 0.0
    resumed: bool = False
    began: float = field(default_factory=time.monotonic)

    def seconds(self) -> float:
        return self.earlier_s + time.monotonic() - self.began

    def minutes(self) -> float:
        return round(self.seconds() / 60, 1)

    def save_time(self) -> None:
        """Records the time spent so far, for an invocation that continues this one."""
        write_atomic(self.path / SPENT, json.dumps({"seconds": self.seconds()}), self.path)


def open_run_folder(runs: Path, settings: dict[str, Any], result: str) -> RunFolder:
    """The newest folder under ``runs`` started with ``settings`` and holding no ``result`` file
    yet (continued), else a new one named by the time it starts."""
    wanted = json.loads(json.dumps(settings))  # as it reads back: tuples are lists
    if runs.is_dir():
        for folder in sorted(runs.iterdir(), reverse=True):
            if not (folder / result).exists() and _read_json(folder / SETTINGS) == wanted:
                spent = folder / SPENT
                earlier = (_read_json(spent) or {}).get("seconds", 0.0)
                return RunFolder(folder, earlier, resumed=True)
    runs.mkdir(parents=True, exist_ok=True)
    stamp, n = time.strftime("%Y%m%dT%H%M%S"), 1
    folder = runs / stamp
    while folder.exists():  # another run started in the same second
        n += 1
        folder = runs / f"{stamp}-{n}"
    folder.mkdir()
    (folder / SETTINGS).write_text(json.dumps(wanted, indent=1) + "\n")
    return RunFolder(folder)


def _read_json(path: Path) -> Any:
    """The file's JSON; None when it is absent or cut short (a kill while it was written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
