"""What every check of the tamper guard returns: a refusal, with its kind and reason."""

from __future__ import annotations

from dataclasses import dataclass

# touches_tests: tests, test hooks or the runner's configuration (settings, entry points);
# unreadable_paths: paths git reads otherwise than the guard, or that git does not show;
# symlink; tampers_runner: the run's own record shows the runner changed or contradicted;
# abnormal_end: the run did not end as pytest ends; not_a_pass: an XFAIL or skip where a
# FAIL_TO_PASS test must pass; runner_aware: code that behaves otherwise when it is tested.
REFUSALS = (
    "touches_tests",
    "unreadable_paths",
    "symlink",
    "tampers_runner",
    "abnormal_end",
    "not_a_pass",
    "runner_aware",
)


@dataclass(frozen=True)
class Refusal:
    """Why a patch earns nothing: ``status`` is one of :data:`REFUSALS`."""

    status: str
    reason: str
