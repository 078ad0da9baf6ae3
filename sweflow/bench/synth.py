"""Task-synthesis throughput: valid tasks per minute on this machine, and yield per operator.

Synthesizes from the three demo projects (parse, cachetools, toolz: the clean release commits of
data/demo's bundles, used as local sources so that nothing is downloaded), offline from the test
wheelhouse when scripts/prefetch.py made one, in a scratch work folder. Every candidate runs the
project's real pytest suite in a fresh sandbox.

Figures, per project and in total: the wall time of each phase (environment, clean runs +
candidates, final check), candidates tried, valid tasks, valid tasks per minute (with and
without the final check), and per operator candidates / compiled / broke tests / valid with the
yield valid / candidates.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweflow.bench import DEMO, wheelhouse
from sweflow.synth.config import SynthConfig
from sweflow.synth.synthesize import Synthesizer, operator_summary

PROJECTS = {"pypi/parse": "1.20.2", "pypi/cachetools": "5.5.2", "pypi/toolz": "1.0.0"}


def run(tasks: int, seed: int = 1, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Synthesize up to ``tasks`` valid tasks from each demo project and time it."""
    report: dict[str, Any] = {"tasks_per_project": tasks, "projects": {}}
    reports = []
    with tempfile.TemporaryDirectory(prefix="sweflow-synth-bench-") as tmp:
        for repo, version in PROJECTS.items():
            progress(f"{repo} {version}: synthesizing up to {tasks} task(s)")
            name = repo.replace("/", "__")
            source = Path(tmp) / "src" / name
            bundle = DEMO.parent / "repos" / f"{name}.bundle"
            subprocess.run(
                ["git", "clone", "-q", "-b", "main", str(bundle), str(source)], check=True
            )
            config = SynthConfig(
                sources=[{"source": str(source), "repo": repo, "version": version}],
                out=Path(tmp) / "out" / f"{name}.jsonl",
                seed=seed,
                max_tasks=tasks,
            )
            start = time.monotonic()
            instances, (source_report,) = Synthesizer(
                config, Path(tmp) / "work", wheelhouse=wheelhouse(), network=False
            ).run()
            wall = time.monotonic() - start
            reports.append(source_report)
            phases = source_report.phases
            search_s = phases["clean_runs"] + phases["candidates"]
            report["projects"][repo] = {
                "valid_tasks": len(instances),
                "candidates_tried": sum(source_report.outcomes.values()),
                "outcomes": dict(source_report.outcomes),
                "wall_s": round(wall, 1),
                "phases_s": phases,
                "valid_per_min_search": round(60 * len(instances) / search_s, 1),
                "valid_per_min_total": round(60 * len(instances) / wall, 1),
            }
    projects = report["projects"].values()
    total_valid = sum(p["valid_tasks"] for p in projects)
    total_wall = sum(p["wall_s"] for p in projects)
    search = sum(p["phases_s"]["clean_runs"] + p["phases_s"]["candidates"] for p in projects)
    report["valid_tasks"] = total_valid
    report["valid_per_min_search"] = round(60 * total_valid / search, 1)
    report["valid_per_min_total"] = round(60 * total_valid / total_wall, 1)
    report["per_operator"] = {
        op: {**row, "yield": round(row["valid"] / row["candidates"], 2) if row["candidates"] else 0}
        for op, row in operator_summary(reports).items()
    }
    return report
