"""The files a grading left behind, read back: what a viewer or an export needs of a verdict.

A Grader call writes the harness's files into one folder (``reward.log_path``): patch.diff,
eval.sh, test_output.txt, run_instance.log and report.json (or ``VERDICT_FILE`` when the
harness would write no report); an evaluation run puts one such folder per prediction under
``<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/`` (sweflow.grading.evaluate).
A run that was graded by ``sweflow eval`` rather than in its batch (``infer`` does not grade)
finds its folder here by instance and patch: the folder graded that very patch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebench.harness.constants import LOG_REPORT, LOG_TEST_OUTPUT, RUN_EVALUATION_LOG_DIR

from sweflow.grading.reward import PATCH_FILE, VERDICT_FILE

SKIPPED_FOLDERS = frozenset({".git", "checkpoints", "model", "models", "layers", "tensorboard"})


@dataclass(frozen=True)
class GradedFolder:
    """One grading's folder and what it says: the harness's report entry for the instance
    (None: the harness wrote none), or the verdict kept without one."""

    path: Path
    instance_id: str
    report: dict[str, Any] | None
    verdict: dict[str, Any] | None

    @property
    def test_output(self) -> Path | None:
        path = self.path / LOG_TEST_OUTPUT
        return path if path.is_file() else None

    def patch(self) -> str | None:
        try:
            return (self.path / PATCH_FILE).read_text()
        except (FileNotFoundError, UnicodeDecodeError):
            return None


def read_graded(path: Path, instance_id: str) -> GradedFolder | None:
    """The grading in ``path`` of ``instance_id``, or None when the folder holds no verdict."""
    report = _json(path / LOG_REPORT)
    entry = report.get(instance_id) if isinstance(report, dict) else None
    verdict = _json(path / VERDICT_FILE)
    if entry is None and not isinstance(verdict, dict):
        return None
    return GradedFolder(path, instance_id, entry, verdict if isinstance(verdict, dict) else None)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


class EvaluationLogs:
    """Every evaluation run's instance folders under some roots, found by instance and patch."""

    def __init__(self, roots: list[Path]) -> None:
        self._folders: dict[str, list[Path]] = {}
        for root in roots:
            for folder in _run_evaluation_dirs(Path(root)):
                for instance in sorted(p for p in folder.glob("*/*") if p.is_dir()):
                    self._folders.setdefault(instance.name, []).append(instance)

    def __len__(self) -> int:
        return sum(len(v) for v in self._folders.values())

    def find(self, instance_id: str, patch: str) -> GradedFolder | None:
        """The newest folder that graded ``patch`` on ``instance_id``, or None."""
        folders = self._folders.get(instance_id, [])
        for folder in sorted(folders, key=_mtime, reverse=True):
            graded = read_graded(folder, instance_id)
            if graded is not None and graded.patch() == patch:
                return graded
        return None


def graded_folder(
    instance_id: str, patch: str, reward: dict[str, Any] | None, logs: EvaluationLogs
) -> GradedFolder | None:
    """Where a run's patch was graded: the folder its own reward names, else an evaluation's."""
    log_path = (reward or {}).get("log_path")
    if log_path and (own := read_graded(Path(log_path), instance_id)) is not None:
        return own
    return logs.find(instance_id, patch) if patch.strip() else None


def _run_evaluation_dirs(root: Path) -> list[Path]:
    """``<x>/logs/run_evaluation/<run_id>`` folders at or under ``root`` (big folders skipped)."""
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here.name == Path(RUN_EVALUATION_LOG_DIR).name and here.parent.name == "logs":
            found += sorted(p for p in here.iterdir() if p.is_dir())
            dirnames.clear()
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_FOLDERS)
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
