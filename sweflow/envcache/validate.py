"""Validation: does an instance's environment reproduce its FAIL_TO_PASS/PASS_TO_PASS claims?

Every run uses a fresh sandbox on the instance's cached layers. With the gold patch every
FAIL_TO_PASS and PASS_TO_PASS test must pass; without it every FAIL_TO_PASS test must fail. Runs
are repeated ``runs`` times each way; a test whose verdict changes between repeats is flaky.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from swebench.harness.grading import test_failed, test_passed

from sweflow.errors import ConfigError
from sweflow.harness.evalscript import EvalRun, StatusReader, run_eval, test_spec_for
from sweflow.instances import Instance, write_jsonl
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.sandbox.tracking import interruptible_map

ValidationOutcome = Literal["valid", "gold_fails", "f2p_passes_without_fix", "flaky", "build_error"]


@dataclass
class Validation:
    instance_id: str
    outcome: ValidationOutcome
    reason: str
    log_path: str
    seconds: float = 0.0
    tests: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Prepared:
    """What validating one instance needs, or why it cannot be validated (a build error)."""

    instance: Instance
    sandbox_spec: SandboxSpec | None
    eval_script: str
    build_error: str | None = None
    build_log: str = ""
    log_parser: str = ""  # the spec's, when the row names none
    statuses: StatusReader | None = None  # the row's format's reading of a log, if its own


def _runs(prep: Prepared, gold: bool, runs: int, log_dir: Path, timeout: float) -> list[EvalRun]:
    spec = test_spec_for(prep.instance, prep.eval_script, prep.log_parser)
    out = []
    for i in range(runs):
        name = f"{'gold' if gold else 'base'}-{i + 1}.log"
        with open_sandbox(prep.sandbox_spec) as sandbox:  # type: ignore[arg-type]
            out.append(
                run_eval(
                    sandbox,
                    prep.instance,
                    spec,
                    log_dir / name,
                    patch=prep.instance.patch if gold else None,
                    timeout=timeout,
                    statuses=prep.statuses,
                )
            )
    return out


def _broken_run(runs: list[EvalRun]) -> EvalRun | None:
    return next((r for r in runs if r.timed_out or not r.patch_applied or not r.parsed), None)


def judge(
    instance: Instance, gold: list[EvalRun], base: list[EvalRun]
) -> tuple[ValidationOutcome, str, dict]:
    """The outcome from the runs' status maps (pure: no sandbox here)."""
    f2p, p2p = instance.FAIL_TO_PASS, instance.PASS_TO_PASS
    broken = _broken_run(gold)
    if broken is not None:
        what = (
            "timed out"
            if broken.timed_out
            else "did not apply"
            if not broken.patch_applied
            else "gave no test results"
        )
        return "gold_fails", f"the gold run {what} (see {broken.log_path.name})", {}
    gold_fail = [{t for t in f2p + p2p if not test_passed(t, run.statuses)} for run in gold]
    base_pass = [{t for t in f2p if not test_failed(t, run.statuses)} for run in base if run.parsed]
    unstable = (set.union(*gold_fail) - set.intersection(*gold_fail)) if gold_fail else set()
    if base_pass:
        unstable |= set.union(*base_pass) - set.intersection(*base_pass)
    tests = {"flaky": sorted(unstable)}
    if unstable:
        return "flaky", f"{len(unstable)} test(s) change verdict between repeated runs", tests
    failing = sorted(gold_fail[0]) if gold_fail else []
    if failing:
        return (
            "gold_fails",
            f"{len(failing)} test(s) fail with the gold patch",
            {"failing": failing},
        )
    passing = sorted(base_pass[0]) if base_pass else []
    if passing:
        return (
            "f2p_passes_without_fix",
            f"{len(passing)} FAIL_TO_PASS test(s) pass without the gold patch",
            {"passing_without_fix": passing},
        )
    if _broken_run(base) is not None and not f2p:
        return "gold_fails", "the run without the gold patch gave no test results", {}
    return "valid", f"{len(f2p)} FAIL_TO_PASS and {len(p2p)} PASS_TO_PASS tests behave", {}


def validate_one(prep: Prepared, log_root: Path, runs: int, timeout: float) -> Validation:
    log_dir = log_root / prep.instance.instance_id
    log_dir.mkdir(parents=True, exist_ok=True)
    if prep.build_error is not None or prep.sandbox_spec is None:
        return Validation(
            prep.instance.instance_id,
            "build_error",
            prep.build_error or "not built",
            prep.build_log,
        )
    start = time.monotonic()
    gold = _runs(prep, True, runs, log_dir, timeout)
    base = _runs(prep, False, runs, log_dir, timeout)
    outcome, reason, tests = judge(prep.instance, gold, base)
    return Validation(
        prep.instance.instance_id,
        outcome,
        reason,
        str(log_dir),
        round(time.monotonic() - start, 3),
        tests,
    )


def validate(
    prepared: Iterable[Prepared],
    log_root: Path,
    *,
    runs: int = 1,
    timeout: float = 1800.0,
    max_workers: int = 2,
    on_done: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Validate instances concurrently (bounded); each outcome goes to ``on_done`` as it lands.

    A validation that ran no test must never call an instance valid: ``runs`` < 1 is refused.
    """
    for name, value in (("runs", runs), ("timeout", timeout), ("max_workers", max_workers)):
        if value <= 0:
            raise ConfigError(f"validate: {name} must be positive, got {value}")
    items = list(prepared)

    def one(prep: Prepared) -> Validation:
        result = validate_one(prep, log_root, runs, timeout)
        if on_done:
            on_done(result)
        return result

    return interruptible_map(one, items, max_workers)


def write_outputs(
    results: list[Validation], instances: list[Instance], out_jsonl: Path, report_dir: Path
) -> None:
    """The validated dataset (valid rows only) and the report as JSON and a Markdown table."""
    valid = {r.instance_id for r in results if r.outcome == "valid"}
    write_jsonl([i for i in instances if i.instance_id in valid], out_jsonl)
    report_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    (report_dir / "validation.json").write_text(
        json.dumps({"counts": counts, "instances": [asdict(r) for r in results]}, indent=2)
    )
    lines = [
        "# Validation report",
        "",
        " | ".join(f"{k}: {v}" for k, v in sorted(counts.items())),
        "",
        "| instance | outcome | reason | seconds | log |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r.instance_id} | {r.outcome} | {r.reason} | {r.seconds} | {r.log_path} |"
        for r in results
    ]
    (report_dir / "validation.md").write_text("\n".join(lines) + "\n")
