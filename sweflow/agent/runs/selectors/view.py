"""What a selector may see: the task as the agent saw it and the samples as they ran, never what
the grader uses. Enforced by construction: a :class:`TaskView` is made from a short list of
fields (no gold patch, no test patch, no FAIL_TO_PASS or PASS_TO_PASS, no eval script, none of a
row's extra fields), a :class:`Candidate` from a trajectory without its reward. Asking either
for a hidden field raises :class:`HiddenFromSelectors` (not AttributeError: ``getattr(view,
"FAIL_TO_PASS", None)`` is refused too), and the selection refuses a selector handed anything
else (:func:`check_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sweflow.agent.trajectory import StepRecord, Trajectory
from sweflow.errors import SweflowError
from sweflow.instances import Instance

# what the grader reads of a task, and of a sample: a selector sees none of it
HIDDEN_TASK_FIELDS = frozenset(
    {"patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "eval_script", "log_parser"}
)
HIDDEN_RUN_FIELDS = frozenset({"reward"})


class HiddenFromSelectors(SweflowError):
    """A selector asked for what the grader uses (the hidden tests, the gold patch, a
    sample's verdict), or was handed something other than the views: refused."""


def _refuse(kind: str, name: str) -> HiddenFromSelectors:
    return HiddenFromSelectors(
        f"a selector asked for the {kind}'s {name!r}, which the grader uses: selectors see "
        "the task as the agent saw it and the samples' runs, never the hidden tests, the gold "
        "patch or a verdict"
    )


class _Hiding:
    """Asking for one of ``_hidden`` is refused; any other missing name is missing."""

    _hidden: ClassVar[frozenset[str]] = frozenset()
    _kind: ClassVar[str] = ""

    def __getattr__(self, name: str) -> Any:  # only for names the view does not have
        if name in self._hidden:
            raise _refuse(self._kind, name)
        raise AttributeError(name)


@dataclass(frozen=True)
class TaskView(_Hiding):
    """A task as its agent saw it: which repository, at which commit, and the issue."""

    _hidden: ClassVar[frozenset[str]] = HIDDEN_TASK_FIELDS
    _kind: ClassVar[str] = "task"

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    version: str | None = None

    @classmethod
    def of(cls, instance: Instance) -> TaskView:
        return cls(
            instance_id=instance.instance_id,
            repo=instance.repo,
            base_commit=instance.base_commit,
            problem_statement=instance.problem_statement,
            version=instance.version,
        )


@dataclass(frozen=True)
class Candidate(_Hiding):
    """One sample of a task as it ran: its index, its final patch, how it ended, its steps
    (thoughts, actions, observations) and conversation; not its verdict."""

    _hidden: ClassVar[frozenset[str]] = HIDDEN_RUN_FIELDS
    _kind: ClassVar[str] = "sample"

    index: int
    patch: str
    exit_status: str
    steps: tuple[StepRecord, ...] = ()
    messages: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, traj: Trajectory) -> Candidate:
        return cls(
            index=traj.run,
            patch=traj.patch,
            exit_status=traj.exit_status,
            steps=tuple(step.model_copy(deep=True) for step in traj.steps),
            messages=tuple(dict(m) for m in traj.messages),
        )


@dataclass(frozen=True)
class Choice:
    """A selector's pick among a task's candidates: the sample index, what it measured of
    each candidate (by index), and a note for people."""

    index: int
    scores: dict[int, Any]
    note: str = ""


def check_inputs(task: object, candidates: list[object]) -> None:
    """Refuse a selection handed anything but the views (an Instance carries the hidden tests,
    a Trajectory its verdict)."""
    if not isinstance(task, TaskView):
        raise HiddenFromSelectors(
            f"a selector was handed a {type(task).__name__}, not a TaskView: it may carry what "
            "the grader uses (test_patch, FAIL_TO_PASS, PASS_TO_PASS)"
        )
    for candidate in candidates:
        if not isinstance(candidate, Candidate):
            raise HiddenFromSelectors(
                f"a selector was handed a {type(candidate).__name__}, not a Candidate: it may "
                "carry the sample's verdict"
            )
