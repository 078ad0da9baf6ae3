"""Selectors: pick one of a task's samples as its prediction (best-of-n), by name.

A selector is a class whose constructor takes a :class:`SelectorContext` and whose
``async choose(task, candidates) -> Choice`` sees only the views of
sweflow.agent.runs.selectors.view (the task without what the grader uses, the samples without
their verdicts). Register one with one line here (its module is imported only when it is
used), or name it by its dotted path (``mypackage.mod:MySelector``):

- ``first``: the first sample (what one run per task gives);
- ``majority``: the most common patch, compared by its changed lines only;
- ``tests``: execution-based, the patch that passes the most of what the agent may run (the
  repository's tests of the files the samples change, the samples' reproduction scripts);
- ``verifier``: execution-free, a served model's judgement of each sample's run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sweflow.errors import ConfigError
from sweflow.registered import check_named, choices_help, load_named, registered_name

if TYPE_CHECKING:
    from sweflow.agent.config import ModelConfig
    from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView
    from sweflow.harness.specs import SpecTable

SELECTORS: dict[str, str] = {
    "first": "sweflow.agent.runs.selectors.first:First",
    "majority": "sweflow.agent.runs.selectors.majority:Majority",
    "tests": "sweflow.agent.runs.selectors.execution:Tests",
    "verifier": "sweflow.agent.runs.selectors.verifier:Verifier",
}
DEFAULT_SELECTOR = "first"


@dataclass
class SelectorContext:
    """What selectors may use besides the views: the layer store and backend of the tasks'
    environments and their specs (the test command; ``tests``), and the endpoint that judges
    runs (``verifier``)."""

    store: Path | None = None
    backend: str = "local"
    specs: SpecTable | None = None
    verifier: ModelConfig | None = None
    timeout_s: float = 300.0  # one command of the ``tests`` selector
    max_prompt_chars: int = 12_000  # the verifier's prompt (a 4096-token model: ~3000 tokens)
    extra: dict = field(default_factory=dict)  # a dotted-path selector's own settings


class Selector(Protocol):
    """Picks one candidate per task."""

    def __init__(self, context: SelectorContext) -> None: ...

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice: ...


def check_selector_name(name: str) -> str:
    """``name`` if it is registered or reads as ``module:Class``; imports nothing."""
    return check_named("selector", name, SELECTORS, ConfigError)


# The type of a config field that names a selector: the Prefect form offers the registered names.
SelectorName = registered_name(check_selector_name, lambda: {"examples": list(SELECTORS)})


def make_selector(name: str, context: SelectorContext) -> Selector:
    """The selector registered as ``name`` (or at the dotted path ``name``) on ``context``."""
    return load_named("selector", name, SELECTORS)(context)


def selectors_help() -> str:
    return choices_help(SELECTORS)
