"""Task-synthesis throughput: valid tasks per minute on this machine, and yield per operator.

``python benchmarks/synth.py --report data/learn/tasks.report.json`` reads the figures of a run
that is already done (a dataset's report, as ``sweflow synth`` writes it; the train / held-out
counts come from the ``split.json`` beside it) instead of synthesizing, with SWE-smith's
published figures beside them.

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
from collections import Counter
from pathlib import Path

from sweflow.bench import DEMO as DEMO_TASKS
from sweflow.bench import WHEELHOUSE
from sweflow.synth.config import SynthConfig
from sweflow.synth.synthesize import SourceReport, Synthesizer, operator_summary

DEMO = DEMO_TASKS.parent
PROJECTS = {"pypi/parse": "1.20.2", "pypi/cachetools": "5.5.2", "pypi/toolz": "1.0.0"}
# What SWE-smith reports of its own synthesis (arXiv:2504.21798, abstract and section 2): the
# scale reached, and what an environment needs. The paper's per-strategy yield table is not
# quoted here: no copy of it could be checked.
SWE_SMITH = {
    "source": "Yang et al., SWE-smith: Scaling Data for Software Engineering Agents, "
    "arXiv:2504.21798v2 (https://arxiv.org/abs/2504.21798)",
    "instances": 50_000,
    "repositories": 128,
    "instances_per_repository": "100s to 1,000s",
    "environment": "SWE-agent installs the repo (<= 100 steps), a person checks the install "
    "and test commands (about 7 minutes per repo) and that > 80% of the tests pass; one "
    "Docker image per repository",
    "validation": "a candidate is kept when it breaks >= 1 passing test (Fail-to-Pass)",
}


def main(tasks: int, seed: int) -> dict:
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
            row = _report_json(source_report)
            row["seconds"] = round(time.monotonic() - start, 1)  # wall, bundle included
            reports.append(row)
    return {"tasks_per_project": tasks, **summarize(reports)}


def _report_json(report: SourceReport) -> dict:
    from sweflow.synth.synthesize import _report_json as as_json

    return as_json(report)


def summarize(reports: list[dict], split: dict | None = None) -> dict:
    """Throughput and yield from per-source reports (``tasks.report.json`` rows): per project,
    in total and per operator; with a split, the train / held-out counts."""
    figures: dict = {"projects": {}}
    for row in reports:
        phases, valid = row["phases"], len(row["tasks"])
        search_s = phases.get("clean_runs", 0) + phases.get("candidates", 0)
        tried = sum(row["outcomes"].values())
        figures["projects"][row["repo"]] = {
            "source": row["source"],
            "clean_tests": row["clean_tests"],
            "suite_seconds": row["clean_seconds"],
            "valid_tasks": valid,
            "candidates_tried": tried,
            "yield": _ratio(row["outcomes"].get("valid", 0), tried),
            "outcomes": dict(row["outcomes"]),
            "wall_s": row["seconds"],
            "phases_s": phases,
            "valid_per_min_search": _ratio(60 * valid, search_s, 1),
            "valid_per_min_total": _ratio(60 * valid, row["seconds"], 1),
        }
    projects = figures["projects"].values()
    valid = sum(p["valid_tasks"] for p in projects)
    wall = sum(p["wall_s"] for p in projects)
    search = sum(p["phases_s"].get("clean_runs", 0) + p["phases_s"].get("candidates", 0)
                 for p in projects)  # fmt: skip
    tried = sum(p["candidates_tried"] for p in projects)
    figures |= {
        "valid_tasks": valid,
        "candidates_tried": tried,
        "yield": _ratio(sum(p["outcomes"].get("valid", 0) for p in projects), tried),
        "wall_minutes": round(wall / 60, 1),
        "valid_per_min_search": _ratio(60 * valid, search, 1),
        "valid_per_min_total": _ratio(60 * valid, wall, 1),
    }
    as_reports = [
        SourceReport(row["source"], row["repo"],
                     per_operator={op: Counter(n) for op, n in row["per_operator"].items()})
        for row in reports
    ]  # fmt: skip
    figures["per_operator"] = {
        op: {**row, "yield": _ratio(row["valid"], row["candidates"])}
        for op, row in operator_summary(as_reports).items()
    }
    if split is not None:
        held = set(split["eval"])
        count = {part: [p["valid_tasks"] for r, p in figures["projects"].items()
                        if (r in held) == (part == "heldout")]
                 for part in ("train", "heldout")}  # fmt: skip
        figures["split"] = {
            "by": split["by"],
            "eval": sorted(held),
            **{f"{part}_tasks": sum(n) for part, n in count.items()},
            **{f"{part}_projects": len(n) for part, n in count.items()},
        }
    figures["swe_smith"] = SWE_SMITH
    return figures


def _ratio(part: float, whole: float, digits: int = 2) -> float | None:
    return round(part / whole, digits) if whole else None


def from_report(path: Path) -> dict:
    """The figures of a finished run: its report, and the split.json beside it if any."""
    split_path = path.parent / "split.json"
    split = json.loads(split_path.read_text()) if split_path.exists() else None
    return {"report": str(path), **summarize(json.loads(path.read_text()), split)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 tasks per project")
    parser.add_argument("--tasks", type=int, default=12, help="valid tasks per project")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, help="summarize this finished run's report")
    args = parser.parse_args()
    if args.report is not None:
        figures = from_report(args.report)
    else:
        figures = main(3 if args.quick else args.tasks, args.seed)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
