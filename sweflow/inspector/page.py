"""The inspector's page: one HTML file with its styles, its script and the runs' data inside.

The same file is served on loopback (``sweflow inspect``, made anew on each load, so a page
reloaded during a run shows the runs saved since) and written as a static file (``--html``)
that opens from disk without a server or a network: no resource is fetched from anywhere, the
data is a JSON block the script reads (with every ``<`` escaped, so no text of a run, however
hostile, can close that block).
"""

from __future__ import annotations

import datetime
import json
from importlib import resources
from pathlib import Path
from typing import Any

from sweflow import __version__
from sweflow.agent.runs.folder import FoundRun, find_runs
from sweflow.files import write_atomic
from sweflow.grading.logs import EvaluationLogs
from sweflow.inspector.steps import issue_of, steps_of
from sweflow.inspector.verdicts import verdict_of

ASSETS = ("inspector.css", "inspector.js")


def page_data(folder: Path, eval_roots: list[Path] | None = None) -> dict[str, Any]:
    """The runs under ``folder`` as the page's JSON; verdicts of runs graded apart are looked
    up in evaluation logs under ``folder`` and ``eval_roots``."""
    folder = Path(folder).resolve()
    runs = find_runs(folder)
    logs = EvaluationLogs([folder, *(eval_roots or [])])
    return {
        "title": folder.name,
        "folder": str(folder),
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "version": __version__,
        "runs": [run_data(f"r{i}", run, logs, folder) for i, run in enumerate(runs)],
    }


def run_data(key: str, found: FoundRun, logs: EvaluationLogs, folder: Path) -> dict[str, Any]:
    """One run: its table cells, its verdict and its steps."""
    traj = found.trajectory
    verdict = verdict_of(traj, logs)
    return {
        "id": key,
        "task": traj.instance_id,
        "source": found.source,
        "run": traj.run,
        "model": traj.model,
        "policy": found.policy_version,
        "rl_step": found.rl_step,
        "redrawn": found.redrawn,
        "steps": len(traj.steps),
        "exit": traj.exit_status,
        "verdict": verdict.word,
        "reward": verdict.reward,
        "tokens": traj.total_tokens,
        "prompt_tokens": traj.prompt_tokens,
        "completion_tokens": traj.completion_tokens,
        "wall_s": round(traj.wall_s, 2),
        "started_at": traj.started_at,
        "tool_mode": traj.tool_mode,
        "error": traj.error,
        "path": found.path.relative_to(folder).as_posix(),
        "patch": traj.patch,
        "issue": issue_of(traj),
        "grading": verdict.as_dict(),
        "trace": steps_of(traj),
    }


def render(data: dict[str, Any]) -> str:
    """The page for ``data``: one self-contained HTML document."""
    assets = resources.files("sweflow.inspector") / "assets"
    template = (assets / "page.html").read_text()
    css, js = ((assets / name).read_text() for name in ASSETS)
    blob = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    title = data["title"].replace("&", "&amp;").replace("<", "&lt;")
    return (
        template.replace("{{title}}", title)
        .replace("/*{{css}}*/", css)
        .replace("/*{{js}}*/", js)
        .replace("{{data}}", blob)
    )


def write_page(folder: Path, out: Path, eval_roots: list[Path] | None = None) -> int:
    """Write the static page of ``folder``'s runs to ``out``; how many runs it shows."""
    data = page_data(folder, eval_roots)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, render(data).encode())
    return len(data["runs"])
