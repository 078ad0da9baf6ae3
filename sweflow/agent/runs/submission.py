"""A job's runs as a SWE-bench leaderboard submission folder, as the SWE-bench experiments
repository and ``sb-cli`` read it.

Layout (the experiments repository's README and ``analysis/get_results.py``, which deletes
anything else from a submission): ``evaluation/<split>/<YYYYMMDD>_<system>/`` holding
``all_preds.jsonl`` (one JSON object a line: ``instance_id``, ``model_name_or_path``,
``model_patch``; one model, each instance once, as ``sb-cli submit`` also checks),
``metadata.yaml`` (``info.name`` and ``tags`` are read by ``analysis/get_leaderboard.py``; its
date comes from the folder's name, 8 digits before the first ``_``), ``README.md``, ``trajs/``
(reasoning traces: SWE-agent ``.traj`` files, one per instance) and ``logs/<instance_id>/``
with the evaluation's ``patch.diff``, ``report.json`` and ``test_output.txt`` (get_results
re-grades from the last two; ``run_instance.log`` it deletes, so it is left out).

One prediction per instance: its first run (pass@1, what the leaderboard accepts); a folder
with more runs a task says so in ``tags.system.attempts``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from swebench.harness.constants import LOG_REPORT, LOG_TEST_OUTPUT

from sweflow.agent.runs.export import predictions
from sweflow.agent.runs.folder import FoundRun
from sweflow.agent.runs.swe_agent import write_traj
from sweflow.agent.trajectory import Trajectory
from sweflow.errors import ConfigError
from sweflow.files import write_atomic
from sweflow.grading.logs import EvaluationLogs, graded_folder
from sweflow.grading.reward import EVAL_FILE, PATCH_FILE

FOLDER_NAME = re.compile(r"\d{8}_[A-Za-z0-9][\w.+-]*")
LOG_FILES = (PATCH_FILE, LOG_REPORT, LOG_TEST_OUTPUT, EVAL_FILE)
PREDICTIONS = "all_preds.jsonl"


@dataclass
class SubmissionInfo:
    """What ``metadata.yaml`` says of the system (``name`` shows on the leaderboard)."""

    name: str
    model: str
    site: str = ""
    report: str = ""
    authors: str = ""
    org: str = ""
    os_model: bool = False
    os_system: bool = True  # sweflow is open source; a system built on it may say otherwise


@dataclass
class SubmissionSummary:
    folder: Path
    predictions: int = 0
    resolved: int = 0
    with_logs: int = 0
    without_logs: list[str] = field(default_factory=list)  # graded nowhere: get_results: 0
    attempts: int = 1


def check_folder_name(out: Path) -> None:
    """The leaderboard reads the date from the folder's name: refuse one without it."""
    if not FOLDER_NAME.fullmatch(out.name):
        raise ConfigError(
            f"{out}: a submission folder is named <YYYYMMDD>_<system> (the leaderboard reads its "
            "date from the name), e.g. 20261125_sweflow_qwen2.5-7b"
        )


def single_source(runs: list[FoundRun]) -> list[Trajectory]:
    """The runs of one job: a submission is one system's predictions."""
    sources = sorted({r.source for r in runs})
    if len(sources) != 1:
        raise ConfigError(
            f"the folder holds the runs of {len(sources)} jobs ({', '.join(sources[:6])}): "
            "export the folder of one of them"
        )
    return [r.trajectory for r in runs]


def write_submission(
    runs: list[Trajectory], out: Path, info: SubmissionInfo, logs: EvaluationLogs
) -> SubmissionSummary:
    """Write the submission folder ``out`` (its name checked first) from ``runs``."""
    check_folder_name(out)
    out.mkdir(parents=True, exist_ok=True)
    preds = predictions(runs, info.model)
    first = {}
    for traj in runs:
        first.setdefault(traj.instance_id, traj)
    attempts = max(Counter(t.instance_id for t in runs).values())
    summary = SubmissionSummary(out, predictions=len(preds), attempts=attempts)
    lines = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds)
    write_atomic(out / PREDICTIONS, lines)
    for iid, traj in first.items():
        write_traj(traj, out / "trajs" / f"{iid}.traj")
        graded = graded_folder(iid, traj.patch, traj.reward, logs)
        if graded is None or graded.report is None:
            summary.without_logs.append(iid)
            continue
        _copy_logs(graded.path, out / "logs" / iid)
        summary.with_logs += 1
        summary.resolved += bool(graded.report.get("resolved"))
    write_atomic(out / "metadata.yaml", yaml.safe_dump(_metadata(info, attempts), sort_keys=False))
    write_atomic(out / "README.md", _readme(info, summary))
    return summary


def _copy_logs(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in LOG_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def _metadata(info: SubmissionInfo, attempts: int) -> dict:
    """``info`` and ``tags`` as get_leaderboard.py reads them; ``assets`` (the S3 copies of
    logs and trajs) are the maintainers' to add."""
    meta: dict = {"info": {"name": info.name}}
    for key in ("site", "report", "authors"):
        if value := getattr(info, key):
            meta["info"][key] = value
    meta["tags"] = {
        "checked": False,
        "model": [info.model],
        "os_model": info.os_model,
        "os_system": info.os_system,
        "system": {"attempts": attempts},
    }
    if info.org:
        meta["tags"]["org"] = [info.org]
    return meta


def _readme(info: SubmissionInfo, summary: SubmissionSummary) -> str:
    rate = summary.resolved / summary.predictions if summary.predictions else 0.0
    lines = [
        f"# {info.name}",
        "",
        f"Model: `{info.model}`. The predictions and trajectories are sweflow agent runs (the "
        "first run of each instance), graded by sweflow's grader, which writes swebench's files.",
        "",
        f"- predictions: {summary.predictions}",
        f"- graded, with logs: {summary.with_logs}",
        f"- resolved: {summary.resolved} ({rate:.1%} of the predictions)",
        f"- attempts per instance: {summary.attempts}",
        "",
    ]
    if summary.without_logs:
        lines += [
            f"{len(summary.without_logs)} predictions have no evaluation logs (not graded): "
            "`python -m analysis.get_results` counts them unresolved.",
            "",
        ]
    lines += [
        "Before opening the pull request (the experiments repository's checklist.md): paste "
        "the output of `python -m analysis.get_results evaluation/<split>/<this folder>` here, "
        "link the system's report (also as `info.report` in metadata.yaml) and name the people "
        "who made it.",
        "",
    ]
    return "\n".join(lines)
