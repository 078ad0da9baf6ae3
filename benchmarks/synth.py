"""Task-synthesis throughput: valid tasks per minute on this machine, and yield per operator.

``python benchmarks/synth.py [--quick] [--tasks N]`` synthesizes from the three demo projects
(parse, cachetools, toolz: the clean release commits of data/demo's bundles, used as local
sources so that nothing is downloaded), offline from the test wheelhouse, in a scratch work
folder. Every candidate runs the project's real pytest suite in a fresh sandbox.

Prints one JSON object: per project and in total, the wall time of each phase (environment,
clean runs + candidates, final check), candidates tried, valid tasks, valid tasks per minute
(with and without the final check), and per operator candidates / compiled / broke tests /
valid with the yield valid / candidates.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweflow.bench import DEMO as DEMO_TASKS
from sweflow.bench import WHEELHOUSE
from sweflow.synth.config import SynthConfig
from sweflow.synth.synthesize import Synthesizer, operator_summary

DEMO = DEMO_TASKS.parent
PROJECTS = {"pypi/parse": "1.20.2", "pypi/cachetools": "5.5.2", "pypi/toolz": "1.0.0"}


def main(tasks: int, seed: int) -> dict:
    report: dict = {"tasks_per_project": tasks, "projects": {}}
    reports = []
    with tempfile.TemporaryDirectory(prefix="sweflow-synth-bench-") as tmp:
        for repo, version in PROJECTS.items():
            source = Path(tmp) / "src" / repo.replace("/", "__")
            bundle = DEMO / "repos" / f"{repo.replace('/', '__')}.bundle"
            subprocess.run(
                ["git", "clone", "-q", "-b", "main", str(bundle), str(source)], check=True
            )
            config = SynthConfig(
                sources=[{"source": str(source), "repo": repo, "version": version}],
                out=Path(tmp) / "out" / f"{repo.replace('/', '__')}.jsonl",
                seed=seed,
                max_tasks=tasks,
            )
            start = time.monotonic()
            instances, (source_report,) = Synthesizer(
                config, Path(tmp) / "work", wheelhouse=WHEELHOUSE, network=False
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
    summary = operator_summary(reports)
    report["per_operator"] = {
        op: {**row, "yield": round(row["valid"] / row["candidates"], 2) if row["candidates"] else 0}
        for op, row in summary.items()
    }
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 tasks per project")
    parser.add_argument("--tasks", type=int, default=12, help="valid tasks per project")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    figures = main(3 if args.quick else args.tasks, args.seed)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
