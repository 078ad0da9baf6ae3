"""Build, validate and evaluate (gold) a set of instances on one executor, as the pipeline's
three per-instance stages do: the files of a Ray run and of a local run can then be compared,
and both timed (tests/test_cluster_ray.py, sweflow.bench.ray)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from sweflow.cluster.executor import Executor
from sweflow.envcache.builder import BuildOptions, BuildResult
from sweflow.envcache.specs import SpecTable
from sweflow.envcache.validate import Validation, write_outputs
from sweflow.envcache.work import BuildWork, ValidateWork, build_instances, validate_instances
from sweflow.grading.evaluate import RunSummary, evaluate
from sweflow.grading.predictions import gold_predictions
from sweflow.grading.reward import Grader
from sweflow.instances import Instance

RUN_ID = "gold"


@dataclass
class SliceRun:
    built: list[BuildResult]
    validated: list[Validation]
    evaluated: RunSummary
    seconds: dict[str, float] = field(default_factory=dict)  # per stage

    def reports(self, out: Path) -> dict[str, bytes]:
        """The files that must be equal between executors: the validated dataset, each
        instance's report.json and the run's summary (logs carry timestamps, reports not)."""
        files = [out / "validate" / "validated.jsonl", self.evaluated.report_path]
        files += sorted((out / "eval").rglob("report.json"))
        return {str(path.relative_to(out)): path.read_bytes() for path in files}


def run_slice(
    executor: Executor,
    specs: SpecTable,
    options: BuildOptions,
    instances: list[Instance],
    out: Path,
) -> SliceRun:
    """The three stages on ``executor``, files under ``out`` (validate/, eval/)."""
    build = BuildWork(specs, options)
    seconds: dict[str, float] = {}
    start = time.monotonic()
    built = build_instances(executor, build, instances)
    seconds["build"] = time.monotonic() - start
    start = time.monotonic()
    checks = out / "validate"
    validated = validate_instances(executor, ValidateWork(build), instances, checks / "logs")
    write_outputs(validated, instances, checks / "validated.jsonl", checks)
    seconds["validate"] = time.monotonic() - start
    start = time.monotonic()
    evaluated = evaluate(
        Grader(options.store, specs),
        instances,
        gold_predictions(instances),
        RUN_ID,
        root=out / "eval",
        report_dir=out / "eval",
        max_workers=options.max_workers,
        executor=executor,
        build=build,
    )
    seconds["evaluate"] = time.monotonic() - start
    return SliceRun(built, validated, evaluated, seconds)
