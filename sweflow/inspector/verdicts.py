"""A run's verdict as a person reads it: one word for the table, and behind it the grading's
FAIL_TO_PASS / PASS_TO_PASS outcome and the tamper guard's reason where it refused the patch.

The verdict comes from the run's own reward (a batch that grades: collect, RL, bench learn), or
else from an evaluation of its patch found in the folder (``infer`` then ``sweflow eval``; the
pipeline's ``eval/``). The grading's folder, when there is one, gives the test lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS

from sweflow.agent.trajectory import INFRA_FAILURES, Trajectory
from sweflow.grading.guard.base import REFUSALS
from sweflow.grading.logs import EvaluationLogs, GradedFolder, graded_folder

NOT_APPLIED = frozenset({"malformed", "binary", "failed"})


@dataclass
class Verdict:
    """What the page shows of a run's grading (``word`` is its table cell)."""

    word: str  # resolved, unresolved, refused, empty, not applied, timeout, error, ungraded
    reward: float | None = None
    reason: str = ""
    apply_status: str = ""
    refusal: dict[str, str] | None = None  # {status, reason} of the tamper guard
    tests: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # F2P/P2P -> outcome
    log_path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "word": self.word,
            "reward": self.reward,
            "reason": self.reason,
            "apply_status": self.apply_status,
            "refusal": self.refusal,
            "tests": self.tests,
            "log_path": self.log_path,
        }


def verdict_of(traj: Trajectory, logs: EvaluationLogs) -> Verdict:
    """The run's verdict from its reward, else from an evaluation of its patch."""
    reward = traj.reward
    graded = graded_folder(traj.instance_id, traj.patch, reward, logs)
    if reward is None:
        if graded is None:
            word = "error" if traj.exit_status in INFRA_FAILURES else "ungraded"
            return Verdict(word, reason=traj.error)
        return _from_folder(graded)
    status = str(reward.get("apply_status", ""))
    resolved = bool(reward.get("resolved"))
    verdict = Verdict(
        _word(status, resolved, bool(reward.get("infrastructure"))),
        reward=_reward_value(reward, resolved),
        reason=str(reward.get("reason", "")),
        apply_status=status,
        tests=_tests(reward.get("report") or {}),
    )
    if status in REFUSALS:
        verdict.refusal = {"status": status, "reason": verdict.reason}
    if graded is not None:
        verdict.log_path = str(graded.path)
        verdict.tests = verdict.tests or _tests(graded.report or {})
    return verdict


def _from_folder(graded: GradedFolder) -> Verdict:
    """A verdict read from an evaluation's files (report.json, or the verdict kept without)."""
    entry = graded.report
    if entry is None:
        kept = graded.verdict or {}
        status = str(kept.get("status", "error"))
        return Verdict(
            _word(status, False, False),
            0.0,
            str(kept.get("reason", "")),
            status,
            log_path=str(graded.path),
        )
    resolved = bool(entry.get("resolved"))
    refused = entry.get("refused")
    status = str(refused) if refused else "applied"
    verdict = Verdict(
        _word(status, resolved, False),
        float(resolved),
        str(entry.get("refusal_reason") or ("resolved" if resolved else "unresolved")),
        status,
        tests=_tests(entry),
        log_path=str(graded.path),
    )
    if refused:
        verdict.refusal = {"status": str(refused), "reason": verdict.reason}
    return verdict


def _word(status: str, resolved: bool, infrastructure: bool) -> str:
    if infrastructure or status == "error":
        return "error"
    if status in REFUSALS:
        return "refused"
    if resolved:
        return "resolved"
    if status in NOT_APPLIED:
        return "not applied"
    if status in ("empty", "timeout"):
        return status
    return "unresolved"


def _reward_value(reward: dict[str, Any], resolved: bool) -> float | None:
    """RL's shaped reward where the run has one, else 1 or 0; None for a machinery failure."""
    if reward.get("infrastructure"):
        return None
    value = reward.get("reward")
    return float(value) if isinstance(value, int | float) else float(resolved)


def _tests(entry: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """FAIL_TO_PASS and PASS_TO_PASS as passed / failed test lists, from a report entry."""
    status = entry.get("tests_status") or {}
    tests = {}
    for kind in (FAIL_TO_PASS, PASS_TO_PASS):
        if kind in status:
            outcome = status[kind]
            tests[kind] = {
                "passed": list(outcome.get("success", [])),
                "failed": list(outcome.get("failure", [])),
            }
    return tests
