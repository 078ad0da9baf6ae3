"""Task-synthesis throughput: valid tasks per minute on this machine, and yield per operator.

Synthesizes from the three demo projects (parse, cachetools, toolz: the clean release commits of
data/demo's bundles, used as local sources so that nothing is downloaded), offline from the test
wheelhouse when scripts/prefetch.py made one, in a scratch work folder. Every candidate runs the
project's real pytest suite in a fresh sandbox. Or, with a finished run's ``tasks.report.json``
(as ``sweflow synth`` writes it, e.g. the learning set's), reads its figures instead, the train /
held-out counts from the ``split.json`` beside it.

Figures, per project and in total: the wall time of each phase (environment, clean runs +
candidates, final check), candidates tried, valid tasks, valid tasks per minute (with and
without the final check), and per operator candidates / compiled / broke tests / valid with the
yield valid / candidates; SWE-smith's published figures beside them.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from sweflow.bench import DEMO, wheelhouse
from sweflow.progress import Progress
from sweflow.synth.config import SynthConfig
from sweflow.synth.synthesize import SourceReport, Synthesizer, operator_summary, report_json

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


def run(tasks: int, seed: int = 1, progress: Progress = print) -> dict[str, Any]:
    """Synthesize up to ``tasks`` valid tasks from each demo project and time it."""
    rows = []
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
            _, (report,) = Synthesizer(
                config, Path(tmp) / "work", wheelhouse=wheelhouse(), network=False
            ).run()
            rows.append(report_json(report))
    return {"tasks_per_project": tasks, **summarize(rows)}


def from_report(path: Path) -> dict[str, Any]:
    """The figures of a finished run: its report, and the split.json beside it if any."""
    split_path = path.parent / "split.json"
    split = json.loads(split_path.read_text()) if split_path.exists() else None
    return {"report": str(path), **summarize(json.loads(path.read_text()), split)}


def summarize(rows: list[dict], split: dict | None = None) -> dict[str, Any]:
    """Throughput and yield from per-source reports (``tasks.report.json`` rows): per project,
    in total and per operator; with a split, the train / held-out counts."""
    figures: dict[str, Any] = {"projects": {}}
    for row in rows:
        phases, valid = row["phases"], len(row["tasks"])
        tried = sum(row["outcomes"].values())
        figures["projects"][row["repo"]] = {
            "source": row["source"],
            "clean_tests": row["clean_tests"],
            "suite_seconds": row["clean_seconds"],
            "valid_tasks": valid,
            "candidates_tried": tried,
            "yield": _ratio(row["outcomes"].get("valid", 0), tried),
            "outcomes": dict(row["outcomes"]),
            "wall_s": round(row["seconds"], 1),
            "phases_s": phases,
            "valid_per_min_search": _ratio(60 * valid, _search_s(phases), 1),
            "valid_per_min_total": _ratio(60 * valid, row["seconds"], 1),
        }
    projects = figures["projects"].values()
    valid = sum(p["valid_tasks"] for p in projects)
    wall = sum(p["wall_s"] for p in projects)
    tried = sum(p["candidates_tried"] for p in projects)
    figures |= {
        "valid_tasks": valid,
        "candidates_tried": tried,
        "yield": _ratio(sum(p["outcomes"].get("valid", 0) for p in projects), tried),
        "wall_minutes": round(wall / 60, 1),
        "valid_per_min_search": _ratio(
            60 * valid, sum(_search_s(p["phases_s"]) for p in projects), 1
        ),
        "valid_per_min_total": _ratio(60 * valid, wall, 1),
    }
    reports = [
        SourceReport(
            row["source"],
            row["repo"],
            per_operator={op: Counter(n) for op, n in row["per_operator"].items()},
        )
        for row in rows
    ]
    figures["per_operator"] = {
        op: {**row, "yield": _ratio(row["valid"], row["candidates"])}
        for op, row in operator_summary(reports).items()
    }
    if split is not None:
        held = set(split["eval"])
        count = {
            part: [
                p["valid_tasks"]
                for r, p in figures["projects"].items()
                if (r in held) == (part == "heldout")
            ]
            for part in ("train", "heldout")
        }
        figures["split"] = {
            "by": split["by"],
            "eval": sorted(held),
            **{f"{part}_tasks": sum(n) for part, n in count.items()},
            **{f"{part}_projects": len(n) for part, n in count.items()},
        }
    figures["swe_smith"] = SWE_SMITH
    return figures


def _search_s(phases: dict[str, float]) -> float:
    return phases.get("clean_runs", 0) + phases.get("candidates", 0)


def _ratio(part: float, whole: float, digits: int = 2) -> float | None:
    return round(part / whole, digits) if whole else None
