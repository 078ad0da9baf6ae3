"""Weighing the guard plugin's record of a run (sweflow/data/guard_plugin.py) against the log.

Only a run the harness would resolve is weighed: the guard can take a resolution away, never
give one. It is refused when

- the guard's files changed during the run, or its plugin never started a session, or a
  session started and did not end (tampers_runner, abnormal_end);
- a hook of a plugin pytest loaded, or a replacement of any of pytest's, pluggy's, unittest's
  or the builtins' objects, or a test function swapped after collection, is defined in a file
  the patch changed or in code with no file at all (tampers_runner) — whatever the spelling
  that put it there: conftest, entry point, ``pytest_plugins``, importlib, getattr, exec;
- the log counts a test passed (PASSED, XFAIL) that pytest's runner did not pass
  (tampers_runner: the report, the terminal or the log was rewritten);
- a FAIL_TO_PASS test is XFAIL or skipped, or any test's XFAIL was raised through the patch's
  code (not_a_pass);
- a FAIL_TO_PASS test that passed under pytest fails, or does not finish, in an interpreter
  without pytest (runner_aware: the code knows it is being tested).

The plugin judges nothing itself: decisions are made here, out of reach of the code it ran.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from swebench.harness.constants import TestStatus
from swebench.harness.grading import get_logs_eval
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from sweflow.grading.guard.base import Refusal
from sweflow.grading.guard.run import Collected, RunWatch

PASSED, XFAIL = TestStatus.PASSED.value, TestStatus.XFAIL.value
_STATUS = {
    "passed": PASSED,
    "failed": "FAILED",
    "error": "ERROR",
    "skipped": "SKIPPED",
    "xfailed": XFAIL,
}


@dataclass
class Record:
    """The plugin's facts, test ids read by the harness's own log parser."""

    starts: list[dict] = field(default_factory=list)
    ends: int = 0
    tests: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    hooks: list[tuple[str, str | None]] = field(default_factory=list)
    replaced: list[tuple[str, str | None]] = field(default_factory=list)
    swapped: list[dict] = field(default_factory=list)
    plain_ids: set[str] = field(default_factory=set)
    plain: dict[str, dict] = field(default_factory=dict)
    plain_end: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, text: str, nonce: str, spec: TestSpec) -> Record:
        parser = PARSER_REGISTRY[spec.log_parser]

        def name(outcome: str, nodeid: str) -> str:
            found = parser(f"{_STATUS.get(outcome, PASSED)} {nodeid}", spec)
            return next(iter(found), nodeid)

        record = cls()
        for line in text.splitlines():
            head, _, rest = line.partition(" ")
            kind, _, payload = rest.partition(" ")
            if head != nonce:
                continue  # not the plugin's: whatever else wrote to the file
            try:
                value = ast.literal_eval(payload)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                record.notes.append(f"an unreadable {kind} line")
                continue
            if kind == "start":
                record.starts.append(value)
            elif kind == "end":
                record.ends += 1
            elif kind == "test":
                record.tests[name(value["o"], value["id"])].append(value)
            elif kind == "hooks":
                record.hooks.extend(value)
            elif kind == "changed":
                record.replaced.extend(value)
            elif kind == "swapped":
                record.swapped.append(value)
            elif kind == "plain_start":
                record.plain_ids.update(name("passed", i) for i in value)
            elif kind == "plain":
                record.plain[name("passed", value["id"])] = value
            elif kind == "plain_end":
                record.plain_end.append(value)
            elif kind in ("fault", "plain_stderr"):
                record.notes.append(f"{kind}: {value}"[:300])
        return record


def judge(
    watch: RunWatch,
    collected: Collected,
    log_path: Path,
    spec: TestSpec,
    fail_to_pass: list[str],
    pass_to_pass: list[str],
) -> Refusal | None:
    """Refuse the run (see the module docstring), or None when its record bears the log out."""
    if not collected.intact:
        return Refusal("tampers_runner", "the guard's files in the sandbox changed during the run")
    record = Record.read(collected.records, watch.nonce, spec)
    if not record.starts:
        why = "; ".join(record.notes) or "the eval script's pytest did not load it"
        return Refusal("tampers_runner", f"no test session ran under the guard's plugin ({why})")
    if record.ends < len(record.starts):
        return Refusal("abnormal_end", "a pytest session started and did not end")
    changed = {p for start in record.starts for p in start.get("changed", ())}
    if not any(start.get("runner_in_repo") for start in record.starts):
        if refusal := _runner_changed(record, changed):
            return refusal
    statuses, _ = get_logs_eval(spec, str(log_path))
    return _claims(record, statuses, fail_to_pass, pass_to_pass, changed) or _plain(
        record, fail_to_pass
    )


def _suspect(origin: str | None, changed: set[str]) -> bool:
    return origin is None or origin in changed


def _where(origin: str | None) -> str:
    return origin or "code with no file"


def _runner_changed(record: Record, changed: set[str]) -> Refusal | None:
    for hook, origin in record.hooks:
        if _suspect(origin, changed):
            return Refusal("tampers_runner", f"{_where(origin)} implements pytest's {hook}")
    for name, origin in record.replaced:
        if _suspect(origin, changed):
            return Refusal(
                "tampers_runner", f"{name} was replaced during the run by {_where(origin)}"
            )
    for swap in record.swapped:
        if _suspect(swap.get("origin"), changed):
            why = f"{swap['id']} was swapped after collection for {_where(swap.get('origin'))}"
            return Refusal("tampers_runner", why)
    return None


def _lookup(case: str, mapping: dict) -> list:
    """The entries of ``case``: its own, or (an id truncated mid-parameter, as swebench reads
    those) every entry it is the start of."""
    if case in mapping:
        return [mapping[case]]
    if case.count("[") > case.count("]"):
        return [value for key, value in mapping.items() if key.startswith(case)]
    return []


def _claims(record, statuses, fail_to_pass, pass_to_pass, changed) -> Refusal | None:
    for case in [*fail_to_pass, *pass_to_pass]:
        claimed = [s for s in _lookup(case, statuses) if s in (PASSED, XFAIL)]
        if not claimed:
            continue
        runs = [run for runs in _lookup(case, record.tests) for run in runs]
        outcomes = {run["o"] for run in runs}
        wanted = "passed" if claimed[0] == PASSED else "xfailed"
        if wanted not in outcomes:
            seen = ", ".join(sorted(outcomes)) or "no run of it"
            return Refusal(
                "tampers_runner",
                f"the log has {case} {claimed[0]}; pytest's runner recorded {seen}",
            )
        if case in fail_to_pass and (claimed[0] == XFAIL or "passed" not in outcomes):
            return Refusal("not_a_pass", f"FAIL_TO_PASS {case} is {claimed[0]}, not passed")
        through = {p for run in runs if run["o"] == "xfailed" for p in run.get("via", ())}
        if claimed[0] == XFAIL and (hit := sorted(through & changed)):
            return Refusal("not_a_pass", f"{case} is XFAIL through the patch's {hit[0]}")
    return None


def _plain(record: Record, fail_to_pass: list[str]) -> Refusal | None:
    for case in fail_to_pass:
        for result in _lookup(case, record.plain):
            if result["o"] == "failed":
                why = f"{case} passes under pytest and fails without it: {result['why']}"
                return Refusal("runner_aware", why)
    if missing := sorted(record.plain_ids - set(record.plain)):
        end = record.plain_end[-1] if record.plain_end else {}
        how = f"ran past {end['timeout']:.0f} s" if end.get("timeout") else "did not finish"
        return Refusal("runner_aware", f"{missing[0]} passes under pytest and {how} without it")
    return None
